"""The whole evolve flow with a real model in every role: `serve` over the embedded `socratic` model
(SmolLM2-135M reading OCR and image tags) writes the spec, finds patterns, plans, judges candidates,
rewrites queries, generates instances with their plans and verifies them blind, each reply in its JSON
schema, on an MMBench dev fixture and a folder of annotated drawn scenes. Weak instances are fine; the
plumbing must hold: every image and every instance accounted for. Evaluating the version with `fastmmeval
run` is expected to fail while SmolLM2 writes no instance that passes the rule checks. One atomic task took
42 minutes on 2 cores under load (every value of every reply is a request re-reading the whole prompt), so
it runs only when asked for: `pytest -m e2e tests/test_evolve_socratic.py`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from evolve_benchmarks import save_mmbench_dev
from evolve_images import write_folder
from socratic_served import KEY_ENV, fastmmeval, role_args, served_socratic  # noqa: F401  (the `served` fixture)

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


@pytest.fixture(scope="module")
def update(served, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, subprocess.CompletedProcess[str]]:
    """One atomic task's update by socratic in every role: its folder, the role args and the run (which
    fails at export when no instance came through)."""
    role = role_args(served)
    root = tmp_path_factory.mktemp("evolve")
    save_mmbench_dev(root / "data", {"image_scene": 3})
    write_folder(root / "images", 6, topics=["image_scene"])
    out = root / "update"
    run = subprocess.run([sys.executable, "-m", "fastmmeval", "evolve", "run", "--tasks", "mmbench_en_dev", "--out",
                          str(out), "--data_dir", str(root / "data"), "--writer", "openai", "--writer_args", role,
                          "--images_dir", str(root / "images"), "--k", "3", "--tau", "0.3", "--m", "2", "--retrieve",
                          "4", "--images", "4", "--queries", "1", "--max_new_tokens", "24", "--no_progress"],
                         env=os.environ | {KEY_ENV: "local"}, capture_output=True, text=True, timeout=3600)
    return out, role, run


def test_socratic_plays_every_role_and_every_image_is_accounted_for(update) -> None:
    out, _, run = update
    assert run.returncode == 0 or "none of the 0 accepted items" in run.stderr, run.stderr[-2000:]
    acquired = json.loads((out / "acquired.json").read_text())["image_scene"]
    assert acquired["acquired"]["rounds"] and all(r["rounds"] for r in acquired["acquired"]["rounds"])
    kept = acquired["acquired"]["kept"]
    assert kept and all(d["reason"] for d in acquired["acquired"]["dropped"])  # each image judged: kept or why not
    generated = json.loads((out / "generated.json").read_text())["image_scene"]
    assert len(generated) == len(kept)  # each kept image: an instance or a recorded failure with the raw reply
    assert all(g["failure"]["reason"] and g["failure"]["raw"] for g in generated if "failure" in g)
    verified = json.loads((out / "verified.json").read_text())["image_scene"]
    assert len(verified) == sum("ok" in g for g in generated)


@pytest.mark.xfail(strict=True, reason="SmolLM2-135M writes the same text for every option (2026-12-02: 4 of 4 "
                   "images, options repeat), so no instance passes the rule checks and nothing is exported")
def test_the_version_socratic_built_is_evaluated(update, tmp_path: Path) -> None:
    out, role, run = update
    assert run.returncode == 0, run.stderr[-2000:]
    manifest = json.loads((out / "v1" / "manifest.json").read_text())
    assert manifest["export"]["accepted"] > 0
    judge = ["--judge_model", "openai", "--judge_args", role]
    fastmmeval("run", "--model", "openai", "--model_args", role, "--include_path", str(out / "v1"),
               "--tasks", "mmbench_en_dev_live_v1", "--output_path", str(tmp_path / "runs"), *judge)
    results = json.loads(next((tmp_path / "runs").glob("*/results.json")).read_text())["results"]
    assert 0 <= results["mmbench_en_dev_live_v1"]["gpt_eval_score,none"] <= 100
