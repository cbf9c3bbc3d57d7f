"""Data parallel runs (`--num_processes`, torchrun-style ranks) on 2 CPU processes with gloo."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from test_evaluate import only_run, run_args
from test_evaluate import task_dir as task_dir  # the fixture

from fastmmeval import distributed
from fastmmeval.cli import main
from fastmmeval.models import MODELS, Model
from fastmmeval.protocol import Request, Response


def results_and_samples(run: Path) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """A run's per-task results (without the timing and token rates of the processes that ran it) and its
    samples, in file order."""
    results = {task: {k: v for k, v in r.items() if k not in ("timing", "tokens")}
               for task, r in json.loads((run / "results.json").read_text())["results"].items()}
    samples = {p.stem: [json.loads(line) for line in p.read_text().splitlines()] for p in (run / "samples").iterdir()}
    return results, samples


def test_two_processes_write_what_one_process_writes(tiny_lm_dir: Path, task_dir: Path, tmp_path: Path) -> None:
    # 9 vqa docs: the ranks get 5 and 4, in batches of 3 (3+2 and 3+1).
    with (task_dir / "vqa.jsonl").open("a") as f:
        f.write(json.dumps({"id": "v9", "image": "horse.png", "question": "What is this?", "answer": "horse"}) + "\n")
    one, two = tmp_path / "one", tmp_path / "two"
    assert main(run_args(tiny_lm_dir, task_dir, one, "--batch_size", "3")) == 0
    assert main(run_args(tiny_lm_dir, task_dir, two, "--batch_size", "3", "--num_processes", "2")) == 0
    results, samples = results_and_samples(only_run(two))
    assert (results, samples) == results_and_samples(only_run(one))
    assert "--num_processes" in json.loads((only_run(two) / "manifest.json").read_text())["command"]


def test_two_processes_resume_a_run(tiny_lm_dir: Path, task_dir: Path, tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    assert main(run_args(tiny_lm_dir, task_dir, reference)) == 0
    out = tmp_path / "resumed"
    run = out / only_run(reference).name
    shutil.copytree(only_run(reference), run)
    (run / "results.json").unlink()
    (run / "samples" / "local_vqa.jsonl").unlink()
    mc = run / "samples" / "local_mc.jsonl"
    kept = b"".join(mc.read_bytes().splitlines(keepends=True)[:5]) + b'{"doc_id": "m5", "tor'
    mc.write_bytes(kept)

    assert main(run_args(tiny_lm_dir, task_dir, out, "--resume", "--num_processes", "2")) == 0
    assert only_run(out) == run
    assert mc.read_bytes().startswith(kept[: kept.rfind(b"\n") + 1])
    assert results_and_samples(run) == results_and_samples(only_run(reference))


@dataclass
class NoArgs:
    """No `--model_args`."""


class FailsOnRank1(Model):
    """Raises while loading on rank 1; elsewhere answers 'cat' and equal log-likelihoods (test-only)."""

    name: ClassVar[str] = "fails_on_rank_1"
    Args = NoArgs

    def __init__(self, args: NoArgs) -> None:
        if os.environ.get("RANK") == "1":
            raise RuntimeError("cannot load the model\non purpose")

    def generate(self, requests: list[Request]) -> list[Response]:
        return [Response(r.id, text="cat") for r in requests]

    def loglikelihood(self, requests: list[Request]) -> list[Response]:
        return [Response(r.id, logprobs=[0.0] * len(r.continuations)) for r in requests]

    def fingerprint(self) -> dict[str, Any]:
        return {"fails_on_rank_1": 1}


def main_with_failing_model(argv: list[str]) -> int:
    """`fastmmeval` with the test-only model registered (run in the rank processes)."""
    MODELS.add(FailsOnRank1.name, FailsOnRank1)
    return main(argv)


@pytest.mark.parametrize("user_threads", [None, "3"])
def test_each_rank_gets_its_share_of_the_cores(monkeypatch: pytest.MonkeyPatch, user_threads: str | None) -> None:
    started: list[dict[str, str]] = []

    class Done:
        returncode = 0

        def __init__(self, cmd: list[str], env: dict[str, str], **kwargs: Any) -> None:
            started.append(env)

        def poll(self) -> int:
            return 0

        def wait(self) -> int:
            return 0

    monkeypatch.setattr(distributed.subprocess, "Popen", Done)
    if user_threads is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", user_threads)
    assert distributed.launch(["run"], 2, timeout_s=1) == 0
    share = str(max(1, len(os.sched_getaffinity(0)) // 2))
    assert [env["OMP_NUM_THREADS"] for env in started] == [user_threads or share] * 2


def test_a_failing_rank_stops_every_rank_with_its_error(task_dir: Path, tmp_path: Path) -> None:
    args = run_args(Path("unused"), task_dir, tmp_path / "runs", "--dist_timeout", "60")
    args[args.index("--model") + 1 : args.index("--model_args") + 2] = [FailsOnRank1.name]
    code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import test_data_parallel as t; "
    code += "sys.exit(t.main_with_failing_model(sys.argv[1:]))"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    start = time.monotonic()
    ranks = [
        subprocess.Popen([sys.executable, "-c", code, *args], env={**env, "RANK": str(r)}, stderr=subprocess.PIPE)
        for r in range(2)
    ]  # as torchrun starts them
    try:
        errs = [p.communicate(timeout=120)[1].decode() for p in ranks]
    finally:
        for p in ranks:
            p.kill()
    assert time.monotonic() - start < 30, "the ranks should stop at once, not when --dist_timeout runs out"
    assert [p.returncode for p in ranks] == [1, 1]
    for err in errs:
        assert err.strip().splitlines() == [
            "fastmmeval: error: rank 1 failed: RuntimeError: cannot load the model on purpose"
        ]
