"""The whole LiveBench flow with a real model in every role: `serve` over the embedded `socratic`
model (SmolLM2-135M) plays extractor, generator, checker, finalizer, scorer and judge, each reply in
its JSON schema. Weak questions are fine; the plumbing must hold: every page and item accounted for,
a month exported, and `fastmmeval run` on it with a judge that sees the screenshots, per subtask.
One page takes well over 15 minutes on 2 cores (every value of every reply is a request re-reading the
whole prompt), so it runs only when asked for: `pytest -m e2e tests/test_live_socratic.py`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from live_sites import SiteServer

from fastmmeval.live.records import SUBTASKS
from fastmmeval.models import MODELS
from fastmmeval.serve.app import ServerHandle, start_server

KEY_ENV = "FMM_SOCRATIC_KEY"
pytestmark = [pytest.mark.slow, pytest.mark.e2e]


@pytest.fixture(scope="module")
def served() -> Iterator[ServerHandle]:
    with start_server(MODELS.get("socratic").from_args({}), served_name="socratic") as server:
        yield server


def fastmmeval(*args: str) -> subprocess.CompletedProcess[str]:
    run = subprocess.run([sys.executable, "-m", "fastmmeval", *args], env=os.environ | {KEY_ENV: "local"},
                         capture_output=True, text=True, timeout=3600)
    assert run.returncode == 0, run.stderr[-2000:]
    return run


def test_socratic_plays_every_role_and_the_month_is_evaluated(tmp_path: Path, served: ServerHandle) -> None:
    role = f"base_url={served.url},model=socratic,api_key_env={KEY_ENV},cache_dir=off,timeout=3000,max_retries=0"
    with SiteServer() as sites:
        registry = tmp_path / "sources.yaml"
        registry.write_text(yaml.safe_dump({"sources": [sites.source("brief").record()]}))
        out = tmp_path / "2026-12"
        fastmmeval("live", "build", "--month", "2026-12", "--out", str(out), "--sources", str(registry),
                   "--generator", "openai", "--generator_args", role, "--max_new_tokens", "24",
                   "--threshold", "0", "--no_progress")
    built = json.loads((out / "build.json").read_text())
    stages = built["manifest"]["stages"]
    assert stages["capture"]["out"] == 1 and stages["extract"] == {"in": 1, "out": 1}
    assert stages["generate"] == {"in": 1, "out": 1}
    questions = stages["check"].get("in", 0) + sum(f["stage"] == "generate" for f in built["failures"])
    assert questions >= len(SUBTASKS)  # every level asked about
    assert len(built["items"]) + len(built["failures"]) == questions  # each one finished or recorded failing
    assert all(f["reason"] for f in built["failures"])
    assert built["items"], "no item made it through: the e2e needs at least one to evaluate"

    fastmmeval("live", "export", "--out", str(out))
    judge = ["--judge_model", "openai", "--judge_args", role]
    fastmmeval("run", "--model", "openai", "--model_args", role, "--include_path", str(out / "dataset"),
               "--tasks", "live_bench_2026_12", "--output_path", str(tmp_path / "runs"), *judge)
    results = json.loads(next((tmp_path / "runs").glob("*/results.json")).read_text())["results"]
    live = results["live_bench_2026_12"]
    kept = {i["draft"]["subtask"] for i in built["items"]}
    assert "gpt4_eval_score,none" in live
    assert {k.removeprefix("gpt4_eval_score_").split(",")[0] for k in live if k.startswith("gpt4_eval_score_")} <= kept
