"""The embedded demo data: counts, valid answers, images that open, determinism, idempotence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

pytest.importorskip("skimage")
pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")

from fastmmeval.tasks.demo_data import DATA_FILES, build_demo  # noqa: E402
from fastmmeval.tasks.sources import DATASET_BUILDERS  # noqa: E402

MIN_ROWS = {"objects.jsonl": 20, "digits.jsonl": 30, "yesno.jsonl": 20}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo") / "data"
    build_demo(out)
    return out


def read_rows(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def all_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_registered() -> None:
    assert DATASET_BUILDERS.get("demo") is build_demo


@pytest.mark.parametrize("name", DATA_FILES)
def test_rows_ids_and_images(built: Path, name: str) -> None:
    rows = read_rows(built / name)
    assert len(rows) >= MIN_ROWS[name]
    ids = [row["id"] for row in rows]
    assert all(isinstance(i, str) and i for i in ids)
    assert len(set(ids)) == len(ids)
    for row in rows:
        assert isinstance(row["question"], str) and row["question"].strip()
        assert isinstance(row["category"], str) and row["category"]
        path = built / row["image"]
        assert row["image"].startswith("images/") and path.is_file(), row
        with Image.open(path) as im:
            assert im.format == "PNG"
            assert im.mode == "RGB"
            assert min(im.size) >= 64


def test_multiple_choice_answers(built: Path) -> None:
    rows = read_rows(built / "objects.jsonl")
    letters = []
    for row in rows:
        choices = row["choices"]
        assert len(choices) == 4 and all(isinstance(c, str) and c for c in choices)
        assert len({c.casefold() for c in choices}) == 4, row  # the correct text is not repeated
        assert row["answer"] in "ABCD" and len(row["answer"]) == 1
        letters.append(row["answer"])
    # The correct letters are spread evenly.
    counts = [letters.count(x) for x in "ABCD"]
    assert max(counts) - min(counts) <= 1, counts


def test_digits(built: Path) -> None:
    rows = read_rows(built / "digits.jsonl")
    assert all(row["answer"] in "0123456789" and len(row["answer"]) == 1 for row in rows)
    assert {row["answer"] for row in rows} == set("0123456789")
    assert all(row["category"] == "digits" for row in rows)
    with Image.open(built / rows[0]["image"]) as im:
        assert im.size == (128, 128)
        assert im.getpixel((0, 0)) == (255, 255, 255)  # dark digit on a white background


def test_yesno_balanced(built: Path) -> None:
    answers = [row["answer"] for row in read_rows(built / "yesno.jsonl")]
    assert set(answers) == {"yes", "no"}
    assert 0.4 <= answers.count("yes") / len(answers) <= 0.6


def test_deterministic(built: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    build_demo(again)
    assert all_files(again) == all_files(built)
    assert not [p for p in tmp_path.iterdir() if p.name != "again"]  # no temp folders left behind


def test_idempotent(built: Path) -> None:
    before = {p: p.stat().st_mtime_ns for p in built.rglob("*")}
    build_demo(built)
    assert {p: p.stat().st_mtime_ns for p in built.rglob("*")} == before


def test_incomplete_folder_is_rebuilt(built: Path, tmp_path: Path) -> None:
    out = tmp_path / "partial"
    out.mkdir()
    (out / "objects.jsonl").write_text("truncated")
    build_demo(out)
    assert all_files(out) == all_files(built)


def test_outdated_folder_is_rebuilt(built: Path, tmp_path: Path) -> None:
    out = tmp_path / "old"
    build_demo(out)
    (out / ".build_stamp").write_text("an older version of the facts\n")
    (out / "yesno.jsonl").write_text("stale")
    build_demo(out)
    assert all_files(out) == all_files(built)
