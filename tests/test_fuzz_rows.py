"""Fuzz of the dataset rows a user feeds a task (jsonl and parquet): fields of wrong types, missing,
huge, nested garbage, null or hostile images, lines that are not UTF-8 or not JSON. `fastmmeval run`
(in-process, scripted model) returns 0 or 1, never raises; each bad row is a failed doc with a failure
kind, or the run stops with one `fastmmeval: error:` line; a finished run has a sample for every doc."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from image_tasks import png, run, write_task

from fastmmeval.errors import FailureKind
from fastmmeval.tasks import catalog

KINDS = {k.value for k in FailureKind}
huge = st.just(100_000).map(lambda n: "x" * n)  # a field of 100 KB
scalar = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=20) | huge
junk = st.recursive(scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                         max_size=3), max_leaves=5)
image_value = st.sampled_from([
    "0.png", "missing.png", "../../../../etc/passwd", "/etc/hostname", "", "bad.png", "sub/../0.png",
    {"path": "0.png", "bytes": None}, {"path": None, "bytes": None}, {"bytes": "not bytes"}, {"path": 5}, 12,
    ["0.png", "0.png"], [["0.png"]], [], [None], None,
]) | junk  # fmt: skip
field = st.sampled_from(["question", "answer", "image", "options", "id"])
text_answer = st.sampled_from(["ok", "A", "B", 0, 1, ["ok", "fine"], [], None, "ok\x00"])


@st.composite
def json_rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Rows of the task's schema with fields replaced by junk or dropped."""
    rows = []
    for i in range(draw(st.integers(1, 4))):
        row: dict[str, Any] = {"id": f"d{i}", "question": "q?", "answer": draw(text_answer), "image": "0.png",
                               "options": ["ok", "no"]}  # fmt: skip
        for name in draw(st.lists(field, max_size=3)):
            value = draw(image_value if name == "image" else junk)
            if draw(st.booleans()):
                row.pop(name, None)
            else:
                row[name] = value
        rows.append(row)
    return rows


BAD_LINES = [b"\xff\xfe not utf-8\n", b"[1, 2]\n", b"{broken\n", b"[" * 5000 + b"\n", b"1234567890" * 600 + b"\n"]

PARQUET_TYPES = {  # column -> values of one Arrow type (or null), so pyarrow can write the column
    "question": st.none() | st.text(max_size=20) | huge,
    "answer": st.none() | st.sampled_from(["ok", "A"]),
    "options": st.none() | st.lists(st.none() | st.text(max_size=5), max_size=3),
    "image": st.none() | st.fixed_dictionaries({"bytes": st.none() | st.sampled_from([png(), b"", b"\x89PNG\r\n"]),
                                                "path": st.none() | st.sampled_from(["0.png", "../x.png", "/etc/x"])}),
}  # fmt: skip


@st.composite
def parquet_rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Rows with one Arrow type per column, nulls anywhere, columns maybe missing."""
    missing = draw(st.sets(st.sampled_from(sorted(PARQUET_TYPES)), max_size=2))
    return [{"id": f"d{i}", **{k: draw(v) for k, v in PARQUET_TYPES.items() if k not in missing}}
            for i in range(draw(st.integers(1, 4)))]  # fmt: skip


cases = st.one_of(
    st.tuples(st.just("jsonl"), json_rows(), st.lists(st.sampled_from(BAD_LINES), max_size=1)),
    st.tuples(st.just("parquet"), parquet_rows(), st.just([])),
    st.tuples(st.just("parquet"), st.just([]), st.sampled_from([[b""], [b"PAR1garbagePAR1"], [b"\x00" * 64]])),
)
MC = 'output_type: multiple_choice\nchoices: options\n'


@pytest.fixture(scope="module")
def no_builtin(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """An empty built-in folder: the rows are the subject, and reading 57 task files per run would cost minutes."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(catalog, "BUILTIN_DIR", tmp_path_factory.mktemp("builtin"))
        yield


@given(case=cases, multiple_choice=st.booleans())
def test_any_rows_fail_their_docs_or_the_run_in_one_line(
    case: tuple[str, list[dict[str, Any]], list[bytes]], multiple_choice: bool, no_builtin: None,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    kind, rows, bad = case
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rows_file = f"rows.{kind}"
        tasks = write_task(folder / "tasks", rows, {"0.png": png(), "bad.png": b"<svg/>"}, rows_file=rows_file)
        if multiple_choice:
            text = (tasks / "img_qa.yaml").read_text().replace("output_type: generate\nextractor: first_word\n", MC)
            (tasks / "img_qa.yaml").write_text(text)
        if bad:
            with (tasks / rows_file).open("ab" if kind == "jsonl" else "wb") as f:
                f.write(b"".join(bad))
        rc = run(tasks, folder / "runs")
        err = capsys.readouterr().err.strip().splitlines()
        assert rc in (0, 1), err
        runs = [p for p in (folder / "runs").glob("*") if (p / "results.json").exists()]
        if not runs:  # stopped before any result: one line naming the file or the field
            assert rc == 1 and len(err) == 1 and err[0].startswith("fastmmeval: error: "), err
            assert str(tasks) in err[0] or "field" in err[0], err
            return
        [folder_run] = runs
        lines = (folder_run / "samples" / "img_qa.jsonl").read_text().splitlines()
        samples = [json.loads(line) for line in lines]
        assert len(samples) == len(rows)  # every doc has its sample: scored or failed with a kind
        assert all(s["failed"] is None or s["failure_kind"] in KINDS for s in samples)
        assert rc == 0 or err[-1].startswith("fastmmeval: error: every doc of img_qa failed"), err
        shutil.rmtree(folder / "runs")


@pytest.mark.parametrize("answer", [None, [], [None]])
def test_a_null_target_fails_its_doc_instead_of_being_the_answer_none(answer: Any, tmp_path: Path) -> None:
    rows = [{"id": "d0", "question": "q?", "answer": answer, "image": "0.png"},
            {"id": "d1", "question": "q?", "answer": ["ok", None], "image": "0.png"}]  # fmt: skip
    tasks = write_task(tmp_path / "tasks", rows, {"0.png": png()})
    assert run(tasks, tmp_path / "runs") == 0
    [folder] = (tmp_path / "runs").iterdir()
    by_id = {s["doc_id"]: s for s in map(json.loads, (folder / "samples" / "img_qa.jsonl").read_text().splitlines())}
    assert by_id["d0"]["failure_kind"] == FailureKind.MISSING_TARGET.value
    assert "target field 'answer' holds no answer" in by_id["d0"]["failed"]
    assert by_id["d1"]["target"] == ["ok"] and by_id["d1"]["failed"] is None


def test_a_deeply_nested_image_field_fails_its_doc(tmp_path: Path) -> None:
    image: Any = "0.png"
    for _ in range(900):  # JSON reads it; recursing into it as a list of images exhausted the stack
        image = [image]
    tasks = write_task(tmp_path / "tasks", [{"id": "d0", "question": "q?", "answer": "ok", "image": image}])
    assert run(tasks, tmp_path / "runs") == 1  # every doc (the one) failed
    [folder] = (tmp_path / "runs").iterdir()
    [sample] = map(json.loads, (folder / "samples" / "img_qa.jsonl").read_text().splitlines())
    assert "image field holds a list of lists" in sample["failed"]


def test_a_damaged_parquet_file_stops_the_run_in_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = write_task(tmp_path / "tasks", [{"id": "d0"}], rows_file="rows.parquet")
    (tasks / "rows.parquet").write_bytes(b"PAR1 not really PAR1")
    assert run(tasks, tmp_path / "runs") == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"fastmmeval: error: dataset file {tasks / 'rows.parquet'}: not a readable parquet file")
    assert "\n" not in err
