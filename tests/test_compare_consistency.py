"""`fastmmeval compare consistency`: do two versions of a task rank the same models alike?

Synthetic run folders (samples with categories, results with breakdowns, as `fastmmeval run` writes them)
for the statistics, checked against scipy and by hand; then the whole flow on the demo: `demo_objects`
against a copy of it whose photos are shrunk and saved as JPEG, with three socratic settings."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import stats

from fastmmeval.cli import main
from fastmmeval.compare import consistency
from fastmmeval.compare.consistency import delta_rank
from fastmmeval.errors import ConfigError
from fastmmeval.results import RunDir
from fastmmeval.runscores import correlation_tests
from fastmmeval.testing.random_init import write_tiny_chat_lm

SKILL = {"weak": 0.3, "mid": 0.5, "good": 0.6, "strong": 0.8}  # chance of a right answer per model
CATEGORIES = {"CP": 0.1, "FP": -0.1, "LR": -0.25}  # how much easier each category is
DOCS_PER_CATEGORY = 40


def write_run(root: Path, model: str, tasks: dict[str, dict[str, tuple[str, float]]], breakdown: bool = True) -> Path:
    """A run folder as `fastmmeval run` writes it: task -> doc id -> (category, exact_match item)."""
    run = RunDir(root)
    run.write_json("manifest.json", {"config": {"model": "fake", "model_args": f"name={model}"},
                                     "model_fingerprint": {"model": "fake", "name": model}})
    results = {}
    for task, docs in tasks.items():
        run.append(task, [{"doc_id": d, "metrics": {"exact_match": v}, "failed": None,
                           **({"categories": {"skill": c}} if breakdown else {})} for d, (c, v) in docs.items()])
        results[task] = {"headline_metric": "exact_match", "fingerprint": f"fp-{task}"}
        if breakdown:
            by_cat: dict[str, list[float]] = {}
            for c, v in docs.values():
                by_cat.setdefault(c, []).append(v)
            results[task]["breakdowns"] = {"skill": {c: {"exact_match,none": float(np.mean(v)), "n": len(v)}
                                                     for c, v in sorted(by_cat.items())}}
    run.write_json("results.json", {"results": results})
    return root


def answers(task: str, p: float, seed: int) -> dict[str, tuple[str, float]]:
    rng = np.random.default_rng(seed)
    return {f"{task}-{c}-{i}": (c, float(rng.random() < p + easy))
            for c, easy in CATEGORIES.items() for i in range(DOCS_PER_CATEGORY)}


@pytest.fixture
def versions(tmp_path: Path) -> tuple[Path, Path]:
    """Four models on `qa` (old runs) and on `qa_v2` (new runs), other docs drawn at the same skills."""
    for side, task, offset in (("old", "qa", 0), ("new", "qa_v2", 100)):
        for i, (m, p) in enumerate(SKILL.items()):
            write_run(tmp_path / side / m, m, {task: answers(task, p, offset + i)})
    return tmp_path / "old", tmp_path / "new"


def points(report: object, level: str) -> tuple[list[float], list[float]]:
    s = report.scores  # type: ignore[attr-defined]
    if level == "task_model":
        keys = [(m, c) for m in report.models for c in report.categories]  # type: ignore[attr-defined]
        return [s["old"][m][c] for m, c in keys], [s["new"][m][c] for m, c in keys]
    return ([float(np.mean(list(s[side][m].values()))) for m in report.models]  # type: ignore[attr-defined]
            for side in ("old", "new"))  # type: ignore[return-value]


def test_correlations_and_p_values_are_scipys() -> None:
    rng = np.random.default_rng(7)
    a = rng.normal(size=30)
    b = a + rng.normal(scale=0.8, size=30)
    got = correlation_tests(list(a), list(b))
    for name, fn in (("pearson", stats.pearsonr), ("spearman", stats.spearmanr), ("kendall", stats.kendalltau)):
        r, p = fn(a, b)
        assert got[name]["value"] == pytest.approx(r, rel=1e-12) and got[name]["p"] == pytest.approx(p, rel=1e-12)
    assert correlation_tests([1.0, 2.0, 3.0], [4.0, 4.0, 4.0])["pearson"] == {"value": None, "p": None}


def test_both_granularities_of_table_2(versions: tuple[Path, Path], tmp_path: Path) -> None:
    report = consistency([versions[0]], [versions[1]], ("qa", "qa_v2"), tmp_path / "out", bootstrap=200)
    assert report.field == "skill" and report.categories == sorted(CATEGORIES) and len(report.models) == 4
    assert set(report.levels) == {"task_model", "model_averaged"}
    assert report.levels["task_model"]["n"] == 4 * 3 and report.levels["model_averaged"]["n"] == 4
    for level, stats_ in report.levels.items():
        old, new = points(report, level)
        for name, fn in (("pearson", stats.pearsonr), ("spearman", stats.spearmanr), ("kendall", stats.kendalltau)):
            r, p = fn(old, new)
            assert stats_[name]["value"] == pytest.approx(r) and stats_[name]["p"] == pytest.approx(p)
            lo, hi = stats_[name]["ci95"]
            assert -1.0 <= lo <= hi <= 1.0 and stats_[name]["draws_defined"] == 200
    # the scores are the breakdown's, on 0-100
    results = json.loads((versions[0] / "strong" / "results.json").read_text())["results"]["qa"]
    for c in CATEGORIES:
        assert report.scores["old"]["fake(name=strong)"][c] == pytest.approx(
            100 * results["breakdowns"]["skill"][c]["exact_match,none"])
    # models this different keep their overall order
    assert report.levels["model_averaged"]["orderings"]["share_kept"] == 1.0
    assert report.bootstrap["unit"] == "a doc"
    assert json.loads((tmp_path / "out" / "consistency.json").read_text()) == json.loads(
        json.dumps(report.to_json()))
    with Image.open(tmp_path / "out" / "delta_rank.png") as png:
        assert png.format == "PNG" and png.width > 200


def test_delta_rank_by_hand() -> None:
    # rows: models; columns: categories. Ranks 1 = best, ties share the best rank, nan is not ranked.
    old = np.array([[90.0, 50.0], [80.0, 50.0], [70.0, 40.0]])
    new = np.array([[60.0, 30.0], [85.0, 20.0], [70.0, np.nan]])
    got = delta_rank(old, new, ["a", "b", "c"], ["x", "y"])
    # x: old ranks a1 b2 c3, new b1 c2 a3.  y: old a1 b1 (tie) c -, new a1 b2.  mean: old 70 65 55, new 45 52.5 nan
    assert got == {"a": {"x": 2, "y": 0, "mean": 1},
                   "b": {"x": -1, "y": 1, "mean": -1},
                   "c": {"x": -1, "y": None, "mean": None}}


def test_pairwise_orderings_kept(tmp_path: Path) -> None:
    # exact scores: on the new version mid and good swap places, nothing else moves
    old = {"weak": 20, "mid": 40, "good": 60, "strong": 80}
    new = {"weak": 25, "mid": 65, "good": 45, "strong": 90}
    for side, task, scores in (("old", "qa", old), ("new", "qa2", new)):
        for m, k in scores.items():
            docs = {f"{task}-{i}": ("all", float(i < k)) for i in range(100)}
            write_run(tmp_path / side / m, m, {task: docs}, breakdown=False)
    report = consistency([tmp_path / "old"], [tmp_path / "new"], ("qa", "qa2"), tmp_path / "out", bootstrap=300)
    level = report.levels["model_averaged"]
    assert level["orderings"]["pairs"] == 6 and level["orderings"]["kept"] == 5
    assert level["orderings"]["share_kept"] == pytest.approx((1 + level["kendall"]["value"]) / 2)  # no ties
    assert level["orderings"]["significant"] == 6  # 20 points apart on 100 docs: all outside their CIs
    (flip,) = level["orderings"]["flipped"]
    assert sorted(flip["models"]) == ["fake(name=good)", "fake(name=mid)"] and flip["new_gap"] * flip["old_gap"] < 0
    # no breakdown: the whole task is the one category, and both levels are the same points
    assert report.field is None and report.categories == ["all"]
    assert report.levels["task_model"]["pearson"] == level["pearson"]
    assert report.delta_rank["fake(name=mid)"] == {"all": -1, "mean": -1}


def test_the_bootstrap_is_seeded_and_names_its_unit(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    for side, task in (("old", "mme_a"), ("new", "mme_b")):
        for m, p in SKILL.items():  # MME scores image pairs: whole images are resampled
            items = {f"{task}-img{i}_q{q}": {"category": "existence", "image": f"img{i}",
                                             "correct": bool(rng.random() < p)} for i in range(30) for q in range(2)}
            run = RunDir(tmp_path / side / m)
            run.write_json("manifest.json", {"config": {"model": "fake", "model_args": m}, "model_fingerprint": m})
            run.append(task, [{"doc_id": d, "metrics": {"mme": v}, "failed": None} for d, v in items.items()])
            run.write_json("results.json", {"results": {task: {"headline_metric": "mme", "fingerprint": task}}})
    args = ([tmp_path / "old"], [tmp_path / "new"], ("mme_a", "mme_b"))
    first = consistency(*args, tmp_path / "a", bootstrap=40, seed=1)
    again = consistency(*args, tmp_path / "b", bootstrap=40, seed=1)
    other = consistency(*args, tmp_path / "c", bootstrap=40, seed=2)
    assert first.levels == again.levels and first.levels != other.levels
    assert "'image'" in first.bootstrap["unit"] and "cluster" in first.bootstrap["unit"]


def test_what_cannot_be_compared_is_refused(versions: tuple[Path, Path], tmp_path: Path) -> None:
    old, new = versions
    with pytest.raises(ConfigError, match="no new run holds task 'qa_v3'"):
        consistency([old], [new], ("qa", "qa_v3"), tmp_path)
    with pytest.raises(ConfigError, match="at least 3"):
        consistency([old / "weak", old / "mid"], [new], ("qa", "qa_v2"), tmp_path)
    with pytest.raises(ConfigError, match="no breakdown of task qa by 'subject'"):
        consistency([old], [new], ("qa", "qa_v2"), tmp_path, field="subject")
    write_run(tmp_path / "extra", "other", {"qa": answers("qa", 0.5, 9)})  # a fifth model, old version only
    report = consistency([old, tmp_path / "extra"], [new], ("qa", "qa_v2"), tmp_path / "out", bootstrap=0)
    assert report.unmatched["models_old_only"] == ["fake(name=other)"] and len(report.models) == 4
    assert report.levels["task_model"]["pearson"]["ci95"] is None  # no bootstrap, no CIs


def test_cli_prints_table_2_and_writes_json_and_png(
    versions: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    out = tmp_path / "cmp"
    argv = ["compare", "consistency", "--runs", str(versions[0]), "--runs", str(versions[1]),
            "--tasks", "qa,qa_v2", "--out", str(out), "--bootstrap", "100"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "task-model" in printed and "model-averaged" in printed and "Pearson" in printed
    assert json.loads((out / "consistency.json").read_text())["levels"]["model_averaged"]["n"] == 4
    assert (out / "delta_rank.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["compare", "consistency", "--runs", str(versions[0]), "--tasks", "qa,qa_v2"]) == 1
    assert "--runs is given twice" in capsys.readouterr().err


# The e2e: demo_objects, and the same questions on its photos shrunk to 3/4 and saved as JPEG (quality 40).
PERTURBED = """\
task: demo_objects_jpeg
extends: demo_objects
description: demo_objects with its photos shrunk to 3/4 and saved as JPEG at quality 40
dataset: {builder: null, data_files: {test: objects.jsonl}}
"""
LIMIT = 16


def jpeg_copy(folder: Path) -> Path:
    """A task folder holding `demo_objects_jpeg`: the demo's objects.jsonl with re-encoded images."""
    from fastmmeval.tasks.demo_data import build_demo

    build_demo(folder / "demo")
    (folder / "task" / "images").mkdir(parents=True)
    rows = [json.loads(line) for line in (folder / "demo" / "objects.jsonl").read_text().splitlines()]
    for row in rows:
        with Image.open(folder / "demo" / row["image"]) as image:
            small = image.resize((image.width * 3 // 4, image.height * 3 // 4), Image.Resampling.BILINEAR)
        row["image"] = row["image"].removesuffix(".png") + ".jpg"
        small.save(folder / "task" / row["image"], format="JPEG", quality=40)
    (folder / "task" / "objects.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "task" / "demo_objects_jpeg.yaml").write_text(PERTURBED)
    return folder / "task"


@pytest.mark.slow
def test_demo_objects_against_its_jpeg_copy_with_three_models(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three socratic models: the real ImageNet tagger describes each photo (its tags move when the photo is
    re-encoded), and three tiny random-weight LMs (seeds 0, 1, 2) pick the options, each its own way.
    SmolLM2 would take minutes per run here, and picked the same options with 3, 1 or 0 tags on the first
    12 docs (ppl mode), which compares nothing."""
    monkeypatch.setenv("COLUMNS", "250")
    tasks = jpeg_copy(tmp_path)
    runs = tmp_path / "runs"
    for seed in range(3):  # one run folder per model, holding both versions
        write_tiny_chat_lm(tmp_path / f"lm{seed}", seed=seed)
        assert main(["run", "--model", "socratic", "--model_args", f"lm={tmp_path / f'lm{seed}'},tags=3,ocr=False",
                     "--tasks", "demo_objects,demo_objects_jpeg", "--include_path", str(tasks), "--limit", str(LIMIT),
                     "--output_path", str(runs), "--bootstrap_iters", "0", "--no_progress"]) == 0
    out = tmp_path / "cmp"
    assert main(["compare", "consistency", "--runs", str(runs), "--runs", str(runs), "--tasks",
                 "demo_objects,demo_objects_jpeg", "--out", str(out), "--bootstrap", "200"]) == 0
    assert "model-averaged" in capsys.readouterr().out
    report = json.loads((out / "consistency.json").read_text())
    assert report["tasks"] == {"old": "demo_objects", "new": "demo_objects_jpeg"} and len(report["models"]) == 3
    assert report["field"] == "category" and len(report["categories"]) >= 3
    assert report["levels"]["task_model"]["n"] == 3 * len(report["categories"])
    assert report["levels"]["model_averaged"]["n"] == 3
    for level in report["levels"].values():
        for name in ("pearson", "spearman", "kendall"):
            assert level[name]["value"] is None or -1.0 <= level[name]["value"] <= 1.0
    assert len({json.dumps(scores) for scores in report["scores"]["old"].values()}) == 3  # three different models
    for run in runs.iterdir():  # the scores are each run's own breakdown, on 0-100
        args = json.loads((run / "manifest.json").read_text())["config"]["model_args"]
        recorded = json.loads((run / "results.json").read_text())["results"]["demo_objects_jpeg"]
        key = f"{recorded['headline_metric']},none"
        for c, score in report["scores"]["new"][f"socratic({args})"].items():
            assert score == pytest.approx(100 * recorded["breakdowns"]["category"][c][key])
    assert set(report["delta_rank"]) == set(report["models"])
    with Image.open(out / "delta_rank.png") as png:
        assert png.format == "PNG"
