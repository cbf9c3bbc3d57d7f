"""End to end on the demo tasks with three real models: full runs, a k-center lite selection with
real encoders, and the validation report, lite scores recomputed from the full runs' samples.

Three `socratic` variants (SmolLM2-135M answering from image descriptions) differ in what the
descriptions hold: three ImageNet tags, one tag, or nothing about the image (OCR off in all three,
to keep the test cheap). To stay within the test budget each model sees the first LIMIT docs of
each demo task, which proves the flow, not the statistics; docs/lite.md reports the same flow on
all 100 docs with more models.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fastmmeval.cli import main
from fastmmeval.evaluate import RunConfig, evaluate
from fastmmeval.tasks.catalog import Catalog
from fastmmeval.tasks.task import Task

LIMIT = 4
VARIANTS = ("tags=3,ocr=False", "tags=1,ocr=False", "tags=0,ocr=False")
DEMO = ("demo_objects", "demo_digits", "demo_yesno")


@pytest.fixture(scope="module")
def full_runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """One full run folder per model on the first LIMIT docs of each demo task."""
    out = tmp_path_factory.mktemp("full")
    runs = []
    for args in VARIANTS:
        config = RunConfig(model="socratic", model_args=args, tasks=["demo"], limit=LIMIT, bootstrap_iters=0)
        run, _ = evaluate(config, output_path=out, batch_size=8, progress=False)
        runs.append(run.root)
    return runs


@pytest.mark.slow
def test_lite_select_and_validate_on_demo_with_three_models(
    full_runs: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    selection = tmp_path / "lite"
    assert main(["lite", "select", "--tasks", "demo", "--size", str(LIMIT // 2), "--limit", str(LIMIT),
                 "--out", str(selection), "--image_encoder", "efficientnet-lite0", "--text_encoder", "minilm",
                 "--no_progress"]) == 0
    catalog = Catalog([selection])
    for task in DEMO:
        chosen = json.loads((selection / f"{task}.json").read_text())
        assert chosen["method"] == "kcenter" and len(chosen["doc_ids"]) == LIMIT // 2
        assert chosen["encoders"]["image"]["encoder"] == "efficientnet-lite0"
        lite = Task(catalog.tasks.get(f"{task}_lite"))
        assert sorted(r.id for r in lite.doc_refs()) == sorted(chosen["doc_ids"])

    report_path = tmp_path / "report.json"
    assert main(["lite", "validate", "--full", *map(str, full_runs), "--lite", str(selection),
                 "--out", str(report_path), "--bootstrap_iters", "300"]) == 0
    printed = capsys.readouterr().out
    report = json.loads(report_path.read_text())
    assert sorted(r["task"] for r in report["tasks"]) == sorted(DEMO)
    for r in report["tasks"]:
        assert r["n_models"] == 3 and r["n_full"] == LIMIT and r["n_lite"] == LIMIT // 2
        assert all(v is None or -1.0 <= v <= 1.0 for v in r["correlations"].values())
        assert r["keep_full"] in (True, False)
    assert len(report["aggregate"]["models"]) == 3
    assert "normalized aggregate" in printed
