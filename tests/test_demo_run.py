"""The embedded default end to end: the real socratic pipeline on the demo group (--limit)."""

import json
from pathlib import Path

import pytest

from fastmmeval.cli import main


@pytest.mark.slow
def test_socratic_on_the_demo_group_scores_every_task(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", "--model", "socratic", "--tasks", "demo", "--limit", "4", "--batch_size", "4"]
    assert main([*args, "--output_path", str(tmp_path), "--no_progress"]) == 0
    table = capsys.readouterr().out
    [run] = tmp_path.iterdir()
    results = json.loads((run / "results.json").read_text())["results"]
    assert set(results) == {"demo_objects", "demo_digits", "demo_yesno"}
    for name, r in results.items():
        assert (r["n"], r["n_failed"]) == (4, 0), name
        for metric, value in r["metrics"].items():
            assert 0.0 <= value["value"] <= 1.0 and name in table and metric in table
    # ppl mode: acc_norm (its headline) and acc, then the task's own accuracy of the headline's pick
    assert list(results["demo_objects"]["metrics"]) == ["acc_norm", "acc", "accuracy"]
    assert results["demo_objects"]["extract_rules"] == {"loglikelihood_argmax_per_byte": 4}
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["model_fingerprint"]["lm"]["gguf_file"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
