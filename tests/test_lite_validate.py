"""Lite validation on synthetic run folders: correlations, ordering checks, verdicts, aggregate."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fastmmeval.cli import main
from fastmmeval.errors import ConfigError
from fastmmeval.lite.export import Selection, write_selection
from fastmmeval.lite.validate import Thresholds, bootstrap_gaps, correlations, validate
from fastmmeval.metrics.base import METRICS
from fastmmeval.results import RunDir

N_DOCS = 200
SKILL = {"weak": 0.35, "mid": 0.55, "strong": 0.8}  # chance of a right answer per model


def correct_matrix(seed: int = 0) -> dict[str, dict[str, float]]:
    """model -> doc id -> 1.0 / 0.0, models of clearly different skill on shared doc difficulty."""
    rng = np.random.default_rng(seed)
    difficulty = rng.uniform(-0.3, 0.3, N_DOCS)
    return {m: {f"d{i}": float(rng.random() < p - difficulty[i]) for i in range(N_DOCS)} for m, p in SKILL.items()}


def write_run(root: Path, model: str, tasks: dict[str, dict[str, object]], metric: str = "exact_match") -> Path:
    """A run folder like `fastmmeval run` writes: manifest, results, samples (metric items by doc)."""
    run = RunDir(root)
    run.write_json("manifest.json", {"config": {"model": "fake", "model_args": f"name={model}"},
                                     "model_fingerprint": {"model": "fake", "name": model}})
    results = {}
    for task, items in tasks.items():
        run.append(task, [{"doc_id": d, "metrics": {metric: v}, "failed": None} for d, v in items.items()])
        results[task] = {"headline_metric": metric, "fingerprint": f"fp-{task.removesuffix('_lite')}"}
    run.write_json("results.json", {"results": results})
    return root


def selection(task: str, ids: list[str]) -> Selection:
    return Selection(task=task, task_fingerprint=f"fp-{task}", method="random", size=len(ids), n_docs=N_DOCS,
                     seed=0, doc_ids=ids)


@pytest.fixture
def full_runs(tmp_path: Path) -> list[Path]:
    scores = correct_matrix()
    return [write_run(tmp_path / "full" / m, m, {"qa": scores[m]}) for m in SKILL]


def test_a_random_half_keeps_rankings(tmp_path: Path, full_runs: list[Path]) -> None:
    ids = [f"d{i}" for i in np.random.default_rng(1).permutation(N_DOCS)[:100]]
    write_selection(tmp_path / "sel", selection("qa", ids))
    report = validate(full_runs, [tmp_path / "sel"])
    (task,) = report["tasks"]
    assert task["n_models"] == 3 and task["n_lite"] == 100 and task["n_full"] == N_DOCS
    assert task["correlations"]["pearson"] > 0.87 and task["correlations"]["kendall"] == pytest.approx(1.0)
    assert task["orderings"]["significant"] == 3 and task["orderings"]["preserved"] == 3
    assert task["keep_full"] is False and task["reasons"] == []
    full_strong = task["scores"]["fake(name=strong)"]["full"]
    assert full_strong == pytest.approx(100 * np.mean(list(correct_matrix()["strong"].values())))
    agg = report["aggregate"]["models"]["fake(name=strong)"]
    assert agg["full"] == pytest.approx(full_strong) and agg["lite"] == agg["lite_all_subsets"]


def test_an_adversarial_subset_flips_an_ordering_and_is_flagged(tmp_path: Path, full_runs: list[Path]) -> None:
    scores = correct_matrix()
    ids = [d for d in scores["weak"] if scores["weak"][d] > scores["strong"][d]]  # docs only the weak one gets
    ids += [d for d in scores["weak"] if scores["weak"][d] == scores["strong"][d]][:10]
    write_selection(tmp_path / "sel", selection("qa", ids))
    (task,) = validate(full_runs, [tmp_path / "sel"])["tasks"]
    assert task["keep_full"] is True
    flipped = {frozenset(f["models"]) for f in task["orderings"]["flipped"]}
    assert {"fake(name=weak)", "fake(name=strong)"} in flipped
    assert any("lite gap" in r for r in task["reasons"])


def test_lite_runs_give_the_same_report_as_a_selection(tmp_path: Path, full_runs: list[Path]) -> None:
    scores = correct_matrix()
    ids = [f"d{i}" for i in range(0, N_DOCS, 2)]
    write_selection(tmp_path / "sel", selection("qa", ids))
    lite_runs = [write_run(tmp_path / "lite" / m, m, {"qa_lite": {d: scores[m][d] for d in ids}}) for m in SKILL]
    from_samples = validate(full_runs, [tmp_path / "sel"])
    from_runs = validate([tmp_path / "full"], [tmp_path / "lite"])  # folders of run folders work too
    assert from_runs["tasks"] == from_samples["tasks"]
    assert lite_runs


def test_identical_scores_cannot_validate(tmp_path: Path) -> None:
    same = {f"d{i}": float(i % 2) for i in range(20)}
    runs = [write_run(tmp_path / m, m, {"qa": same}) for m in SKILL]
    write_selection(tmp_path / "sel", selection("qa", list(same)[:10]))
    (task,) = validate(runs, [tmp_path / "sel"])["tasks"]
    assert task["correlations"]["pearson"] is None and task["keep_full"] is True
    assert "saturated" in task["reasons"][0] and "no pair of models differs" in task["reasons"][1]


def test_two_models_are_too_few_for_a_verdict(tmp_path: Path, full_runs: list[Path]) -> None:
    write_selection(tmp_path / "sel", selection("qa", ["d1", "d2", "d3"]))
    (task,) = validate(full_runs[:2], [tmp_path / "sel"])["tasks"]
    assert task["keep_full"] is None and "at least 3" in task["reasons"][0]


def test_a_selection_of_another_task_version_is_refused(tmp_path: Path, full_runs: list[Path]) -> None:
    write_selection(tmp_path / "sel", replace(selection("qa", ["d1"]), task_fingerprint="other"))
    with pytest.raises(ConfigError, match="task changed"):
        validate(full_runs, [tmp_path / "sel"])


def test_a_subset_that_splits_mme_image_pairs_is_flagged(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    runs = []
    for m, p in SKILL.items():
        items = {f"img{i}_q{q}": {"category": "existence", "image": f"img{i}", "correct": bool(rng.random() < p)}
                 for i in range(60) for q in range(2)}
        runs.append(write_run(tmp_path / m, m, {"mme": items}, metric="mme"))
    halves = [f"img{i}_q0" for i in range(60)]  # one question of every image: every pair split
    write_selection(tmp_path / "sel", selection("mme", halves))
    (task,) = validate(runs, [tmp_path / "sel"], Thresholds(bootstrap_iters=50))["tasks"]
    assert task["keep_full"] is True and any("splits 60" in r for r in task["reasons"])


def test_vectorized_bootstrap_matches_the_generic_one() -> None:
    scores = correct_matrix()
    items = [scores[m] for m in SKILL]
    metric = METRICS.get("exact_match")
    fast = bootstrap_gaps(metric, items, iters=30, seed=3)
    slow = bootstrap_gaps(replace(metric, stderr="bootstrap"), items, iters=30, seed=3)
    np.testing.assert_allclose(fast, slow, rtol=1e-12)


def test_correlations_match_scipy_and_are_none_when_undefined() -> None:
    from scipy import stats

    full, lite = [10.0, 20.0, 35.0, 50.0], [12.0, 18.0, 40.0, 44.0]
    got = correlations(full, lite)
    assert got["pearson"] == pytest.approx(stats.pearsonr(full, lite)[0])
    assert got["spearman"] == pytest.approx(1.0) and got["kendall"] == pytest.approx(1.0)
    assert correlations(full, [5.0] * 4) == {"pearson": None, "spearman": None, "kendall": None}


def test_cli_prints_tables_and_writes_the_json_report(
    tmp_path: Path, full_runs: list[Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    write_selection(tmp_path / "sel", selection("qa", [f"d{i}" for i in range(0, N_DOCS, 2)]))
    out = tmp_path / "report.json"
    argv = ["lite", "validate", "--full", *map(str, full_runs), "--lite", str(tmp_path / "sel"), "--out", str(out),
            "--bootstrap_iters", "200"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "lite ok" in printed and "normalized aggregate" in printed
    assert json.loads(out.read_text())["tasks"][0]["task"] == "qa"
    assert main(["lite", "validate", "--full", str(tmp_path / "nowhere"), "--lite", str(tmp_path / "sel")]) == 1
