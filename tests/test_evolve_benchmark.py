"""The original benchmark read through the task catalog: MMBench dev's atomic tasks (`category`) under
their L-2 abilities, each question counted once whatever rotations the split holds, its examples and
images; another benchmark by its layout; one clear error for a task or field that does not fit."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import datasets
import pytest
from evolve_benchmarks import ABILITIES, MMBENCH_FEATURES, mmbench_dev_rows, save_mmbench_dev
from task_fixtures import save_split, task_config

from fastmmeval.errors import ConfigError
from fastmmeval.evolve.benchmark import Layout, load_benchmark
from fastmmeval.tasks.sources import DATA_DIR_ENV

ORIGINAL = {"ocr": 4, "image_scene": 2, "spatial_relationship": 3}


@pytest.fixture(autouse=True)
def _offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))


def test_mmbench_dev_by_atomic_task(tmp_path: Path) -> None:
    rows = save_mmbench_dev(tmp_path / "data", ORIGINAL)
    bench = load_benchmark("mmbench_en_dev")
    assert bench.task == "mmbench_en_dev" and bench.layout == Layout() and bench.circular
    assert bench.atomic_tasks() == ["image_scene", "ocr", "spatial_relationship"]
    assert bench.counts() == {"image_scene": 2, "ocr": 4, "spatial_relationship": 3}  # rotations counted once
    assert len(rows) == sum(2 + q % 3 for q in range(9))
    for atomic in bench.atomic_tasks():
        questions = bench.questions(atomic)
        assert all(rows[r]["index"] < 1_000_000 and rows[r]["category"] == atomic for r in questions)
        assert bench.ability(atomic) == ABILITIES[atomic]
        assert bench.option_counts(atomic) == Counter(2 + rows[r]["index"] % 3 for r in questions)
    first = bench.questions("ocr")[1]  # question 1: three options, the hint "nan" (none)
    assert bench.example(first) == {"question": "Question 1 on ocr?", "hint": "",
                                    "options": ["red ocr 1", "green ocr 1", "blue ocr 1"], "answer": "B"}  # fmt: skip
    assert bench.example(bench.questions("image_scene")[1])["hint"] == "Look at the left half."  # question 5
    assert bench.image(first).tobytes() == rows[first]["image"].convert("RGB").tobytes()
    text = bench.description()
    assert "MMBench dev (en)" in text and "- ocr (4, finegrained_perception (instance-level))" in text
    assert "{hinted_question} There are several options" in text


def test_a_question_without_its_rotation_0_counts_once_by_its_lowest_index(tmp_path: Path) -> None:
    rows = mmbench_dev_rows({"ocr": 2})
    kept = [r for r in rows if r["index"] != 1]  # question 1 (3 options) keeps rotations 1 and 2 only
    save_split(tmp_path / "data", task_config("mmbench_en_dev"), kept, MMBENCH_FEATURES)
    bench = load_benchmark("mmbench_en_dev")
    assert [kept[r]["index"] for r in bench.questions("ocr")] == [0, 1_000_001]
    assert bench.example(bench.questions("ocr")[1])["options"] == ["green ocr 1", "blue ocr 1", "red ocr 1"]


def test_another_benchmark_by_its_layout(tmp_path: Path) -> None:
    s = datasets.Value("string")
    features = datasets.Features({
        "answer": s, **{f"choice_{c}": s for c in "abcd"}, "data_id": s, "data_type": s, "question": s,
        "question_id": s, "question_type_id": datasets.Value("int16"), "image": datasets.Sequence(datasets.Image()),
    })  # fmt: skip
    rows = [
        {
            "answer": "C",
            **{f"choice_{c}": f"{c}{q}" for c in "abcd"},
            "data_id": "",
            "data_type": "image",
            "question": f"Q{q}?",
            "question_id": str(q),
            "question_type_id": 7,
            "image": [],
        }
        for q in range(3)
    ]
    save_split(tmp_path / "data", task_config("seedbench"), rows, features)
    with pytest.raises(ConfigError, match=r"task seedbench: its rows have no field 'category' \(the layout's atomic"):
        load_benchmark("seedbench")
    layout = Layout(atomic="question_type_id", ability=None, hint=None, index="question_id", source=None,
                    options=("choice_a", "choice_b", "choice_c", "choice_d"))  # fmt: skip
    bench = load_benchmark("seedbench", layout=layout)
    assert not bench.circular and bench.counts() == {"7": 3} and bench.ability("7") is None
    assert bench.example(2) == {"question": "Q2?", "hint": "", "options": ["a2", "b2", "c2", "d2"], "answer": "C"}


def test_tasks_that_do_not_fit_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="task textvqa_val: not a multiple-choice task"):
        load_benchmark("textvqa_val")
    with pytest.raises(ConfigError, match="task mmbench_en_test: its split has no public answers"):
        load_benchmark("mmbench_en_test")
    with pytest.raises(ConfigError, match="'mcq' is a group of tasks, not one task"):
        load_benchmark("mcq")
    save_mmbench_dev(tmp_path / "data", ORIGINAL)
    with pytest.raises(ConfigError, match="task mmbench_en_dev: its rows have no field 'topic' .the layout's atomic"):
        load_benchmark("mmbench_en_dev", layout=Layout(atomic="topic"))
    bench = load_benchmark("mmbench_en_dev")
    with pytest.raises(ConfigError, match="task mmbench_en_dev: no atomic task 'celebrity_recognition'"):
        bench.questions("celebrity_recognition")
