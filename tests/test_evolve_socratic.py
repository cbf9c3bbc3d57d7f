"""The whole evolve flow with a real model in every role: `serve` over the embedded `socratic` model
(SmolLM2-135M reading OCR and image tags) writes the spec, finds patterns, plans, judges candidates,
rewrites queries, generates instances with their plans and verifies them blind, each reply in its JSON
schema, on an MMBench dev fixture and a folder of annotated drawn scenes; then the version is evaluated
with `fastmmeval run` under MMBench's protocol. Weak instances are fine; the plumbing must hold: every
image and every instance accounted for. It takes minutes on 2 cores (every value of every reply is a
request re-reading the whole prompt), so it runs only when asked for: `pytest -m e2e tests/test_evolve_socratic.py`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from evolve_benchmarks import save_mmbench_dev
from evolve_images import write_folder
from socratic_served import fastmmeval, role_args, served_socratic  # noqa: F401  (the `served` fixture)

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def test_socratic_plays_every_role_and_the_version_is_evaluated(served, tmp_path: Path) -> None:
    role = role_args(served)
    save_mmbench_dev(tmp_path / "data", {"image_scene": 3})
    write_folder(tmp_path / "images", 6, topics=["image_scene"])
    out = tmp_path / "update"
    fastmmeval("evolve", "run", "--tasks", "mmbench_en_dev", "--out", str(out), "--data_dir", str(tmp_path / "data"),
               "--writer", "openai", "--writer_args", role, "--images_dir", str(tmp_path / "images"), "--k", "3",
               "--tau", "0.3", "--m", "2", "--retrieve", "4", "--images", "4", "--queries", "1",
               "--max_new_tokens", "24", "--no_progress")
    manifest = json.loads((out / "v1" / "manifest.json").read_text())
    task = manifest["atomic"]["image_scene"]
    assert task["rounds"] and all(r["rounds"] for r in task["rounds"])  # every controller round logged
    looked_at = task["acquire"]["kept"] + len([d for d in task["dropped"] if "sha" in d])
    assert task["acquire"]["kept"] <= 4 <= looked_at  # each image judged kept or dropped with why
    assert all(d["reason"] for d in task["dropped"])
    verified = json.loads((out / "verified.json").read_text())["image_scene"]
    generated = json.loads((out / "generated.json").read_text())["image_scene"]
    assert len(generated) == task["acquire"]["kept"]  # each kept image: an instance or a recorded failure
    assert len(verified) == sum("ok" in g for g in generated)
    accepted = [v for v in verified if "ok" in v and v["ok"]["accepted"]]
    assert manifest["export"]["accepted"] == len(accepted) > 0

    judge = ["--judge_model", "openai", "--judge_args", role]
    fastmmeval("run", "--model", "openai", "--model_args", role, "--include_path", str(out / "v1"),
               "--tasks", "mmbench_en_dev_live_v1", "--output_path", str(tmp_path / "runs"), *judge)
    results = json.loads(next((tmp_path / "runs").glob("*/results.json")).read_text())["results"]
    assert 0 <= results["mmbench_en_dev_live_v1"]["gpt_eval_score,none"] <= 100
