"""The whole LiveBench flow with a real model in every role: `serve` over the embedded `socratic`
model (SmolLM2-135M) plays extractor, generator, checker, finalizer, scorer and judge, each reply in
its JSON schema. Weak questions are fine; the plumbing must hold: every page and question accounted
for. The month's evaluation (export, then `fastmmeval run` with socratic as the judge) is expected to
fail while SmolLM2 writes no criteria worth exactly 10 points: no item comes through to evaluate.
One page takes 10 to 20 minutes on 2 cores (every value of every reply is a request re-reading the whole
prompt), so it runs only when asked for: `pytest -m e2e tests/test_live_socratic.py`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from live_sites import SiteServer
from socratic_served import fastmmeval, role_args, served_socratic  # noqa: F401  (the `served` fixture)

from fastmmeval.live.records import SUBTASKS

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


@pytest.fixture(scope="module")
def month(served, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The brief fixture page built into a month by socratic in every role: its folder and the role args."""
    role = role_args(served)
    out = tmp_path_factory.mktemp("live") / "2026-12"
    with SiteServer() as sites:
        registry = out.parent / "sources.yaml"
        registry.write_text(yaml.safe_dump({"sources": [sites.source("brief").record()]}))
        fastmmeval("live", "build", "--month", "2026-12", "--out", str(out), "--sources", str(registry),
                   "--generator", "openai", "--generator_args", role, "--max_new_tokens", "24",
                   "--threshold", "0", "--no_progress")
    return out, role


def test_socratic_plays_every_role_and_every_question_is_accounted_for(month: tuple[Path, str]) -> None:
    built = json.loads((month[0] / "build.json").read_text())
    stages = built["manifest"]["stages"]
    assert stages["capture"]["out"] == 1 and stages["extract"] == {"in": 1, "out": 1}
    assert stages["generate"] == {"in": 1, "out": 1}
    questions = stages["check"].get("in", 0) + sum(f["stage"] == "generate" for f in built["failures"])
    assert questions >= len(SUBTASKS)  # every level asked about
    assert len(built["items"]) + len(built["failures"]) == questions  # each one finished or recorded failing
    assert all(f["reason"] and f["raw"] for f in built["failures"])  # weak replies are kept, with why


@pytest.mark.xfail(strict=True, reason="SmolLM2-135M's criteria never add up to 10 points (2026-12-02: all 8 "
                   "questions with 6 criteria of 1 point), so no item reaches the evaluation")
def test_the_month_socratic_built_is_evaluated_with_its_judge(month: tuple[Path, str], tmp_path: Path) -> None:
    out, role = month
    built = json.loads((out / "build.json").read_text())
    assert built["items"], "no item made it through: nothing to evaluate"
    fastmmeval("live", "export", "--out", str(out))
    judge = ["--judge_model", "openai", "--judge_args", role]
    fastmmeval("run", "--model", "openai", "--model_args", role, "--include_path", str(out / "dataset"),
               "--tasks", "live_bench_2026_12", "--output_path", str(tmp_path / "runs"), *judge)
    results = json.loads(next((tmp_path / "runs").glob("*/results.json")).read_text())["results"]
    live = results["live_bench_2026_12"]
    kept = {i["draft"]["subtask"] for i in built["items"]}
    assert "gpt4_eval_score,none" in live
    assert {k.removeprefix("gpt4_eval_score_").split(",")[0] for k in live if k.startswith("gpt4_eval_score_")} <= kept
