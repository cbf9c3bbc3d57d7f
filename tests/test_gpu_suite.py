"""The GPU suite's CPU rehearsal: bench/gpu_suite.sh end to end at small sizes, so the H200 run cannot fail
on a typo."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KEYS = {
    1: {"radius_triton", "radius_torch", "radius_rel_vs_torch", "cpu_subsample", "agree"},
    2: {"model", "float32", "bfloat16", "fp32_identical"},
    3: {"builds", "lookups", "efficiency_base_threads"},
    4: {"cpu_s", "threads", "radius_cpu"},
}


def test_the_suite_rehearses_every_item_on_the_cpu(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "GPU_SUITE_WORK": str(tmp_path / "work")}
    done = subprocess.run(["bash", "bench/gpu_suite.sh", str(out), "--device", "cpu", "--small", "--no_install"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [json.loads(x) for x in (out / "suite.jsonl").read_text().splitlines()]
    assert [line["item"] for line in lines] == [1, 2, 3, 4]
    for line in lines:
        assert line["status"] in ("ok", "skipped"), line
        assert line["status"] == "ok" or line["reason"], line
        assert KEYS[line["item"]] <= line.keys(), line
    kcenter, engine, contam, _ = lines
    assert kcenter["status"] == "skipped" and "CUDA" in kcenter["reason"] and kcenter["agree"]
    assert engine["fp32_identical"] and engine["bfloat16"]["status"] == "skipped"
    assert engine["float32"]["ours_vs_static8"]["ours"]["docs_per_s"] > 0
    assert contam["builds"]["1"]["efficiency"] == 1.0 and contam["lookups"]["per_s_one_call"] > 0
    assert (out / "suite.log").stat().st_size > 0
