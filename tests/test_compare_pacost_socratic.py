"""PaCoST end to end with real models: the embedded `socratic` model (SmolLM2-135M reading image tags and
OCR) answers the demo tasks and judges its own answers, while `fastmmeval serve` over another socratic
plays the paraphrase role through the `openai` backend. SmolLM2's paraphrases are weak; the plumbing must
hold: every doc is a pair or a recorded failure, every confidence a probability, and a rerun asks the
model nothing it answered. Measured 8.5 minutes on 2 shared cores (3 docs of each demo task, run twice; the
second run answers from the cache), so it runs only when asked for:
`pytest -m e2e tests/test_compare_pacost_socratic.py`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from socratic_served import fastmmeval, role_args, served_socratic  # noqa: F401  (the `served` fixture)

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def test_socratic_pacost_on_the_demo_tasks(served, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "pacost"
    command = ("compare", "pacost", "--model", "socratic", "--tasks", "demo", "--limit", "3",
               "--paraphraser", "openai", "--paraphraser_args", role_args(served), "--max_new_tokens", "48",
               "--batch_size", "8", "--out", str(out))  # fmt: skip
    shown = fastmmeval(*command).stdout
    first = json.loads((out / "pacost.json").read_text())
    assert set(first["tasks"]) == {"demo_objects", "demo_digits", "demo_yesno"}
    for name, task in first["tasks"].items():
        assert task["docs"] == 3
        assert len(task["pairs"]) + sum(task["failed"].values()) == 3, name
        assert task["delta"]["n"] == len(task["pairs"])
        assert f"{name}: {len(task['pairs'])} pairs of 3 docs" in shown
        for pair in task["pairs"]:
            assert 0 <= pair["c_orig"] <= 1 and 0 <= pair["c_para"] <= 1
            assert pair["delta"] == pytest.approx(pair["c_orig"] - pair["c_para"])
            assert pair["paraphrase"] != pair["question"]
    assert sum(len(task["pairs"]) for task in first["tasks"].values()) > 0

    fastmmeval(*command)
    again = json.loads((out / "pacost.json").read_text())
    assert again["tasks"] == first["tasks"]
    for stage in ("answer", "confidence"):
        assert again["calls"][stage]["calls"] == first["calls"][stage].get("failed", 0)
