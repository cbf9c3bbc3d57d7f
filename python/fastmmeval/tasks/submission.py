"""Submission files: for a test split whose answers are not public, the file its evaluation server
scores, made as lmms-eval 0.7.3 makes it (the `submission` metric of its test tasks).

A task file names a format with `submission: NAME`. For each answered doc the format makes an entry
(what lmms-eval's process_results returns under "submission"), which the doc's sample keeps; the
entries of the answered docs, in doc order, become the file (`write`), so a resumed run rebuilds the
same file from its samples."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fastmmeval.errors import DocError
from fastmmeval.extract import Extraction
from fastmmeval.metrics.vqa import normalize_vqa_answer
from fastmmeval.registry import Registry
from fastmmeval.tasks.families.mmmu import mmmu_open_readings

# (the doc's fields, the response text (None for a loglikelihood request), what the task's extractor read)
Entry = Callable[[Mapping[str, Any], str | None, Extraction], Any]


@dataclass(frozen=True)
class SubmissionFormat:
    """One server's file: `entry` makes a doc's entry, `write` turns the entries (in doc order) into
    the file's bytes, `extension` ends its name."""

    entry: Entry
    write: Callable[[list[Any]], bytes]
    extension: str


SUBMISSION_FORMATS: Registry[SubmissionFormat] = Registry("submission format")


def submission_file(fmt: SubmissionFormat, samples: list[dict[str, Any]]) -> tuple[bytes, int]:
    """The file made from a task's samples (in doc order) and how many predictions it holds: one per
    answered doc (a failed doc has no entry)."""
    entries = [s["submission"] for s in samples if s.get("failed") is None and "submission" in s]
    return fmt.write(entries), len(entries)


def _field(fields: Mapping[str, Any], name: str, fmt: str) -> Any:
    if name not in fields:
        raise DocError(f"{fmt}: the doc has no field {name!r}")
    return fields[name]


def _answer(response: str | None, extraction: Extraction) -> str:
    """The response stripped, as lmms-eval strips every generated response before a task's
    process_results sees it; for a loglikelihood request, the option it picked."""
    return (response if response is not None else extraction.value or "").strip()


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()  # json.dump's defaults, as lmms-eval writes these files


# --- MMBench (mmbench_en_test, mmbench_cn_test) ------------------------------------------------

MMBENCH_COLUMNS = ("index", "question", "answer", "prediction", "hint", "source", "split", "category", "L2-category")


def mmbench_entry(fields: Mapping[str, Any], response: str | None, extraction: Extraction) -> dict[str, Any]:
    """lmms-eval's mmbench_process_results submission row: the doc's columns, the response stripped
    as `prediction` (the server matches it to an option itself), and options A-E ("nan" for one the
    row has no column for)."""
    row = {c: _field(fields, c, "mmbench_xlsx") for c in MMBENCH_COLUMNS if c != "prediction"}
    row["prediction"] = _answer(response, extraction)
    return {**{c: row[c] for c in MMBENCH_COLUMNS}, **{c: fields.get(c, "nan") for c in "ABCDE"}}


def xlsx(rows: list[dict[str, Any]]) -> bytes:
    """The rows as the one sheet of an Excel workbook, as pandas' to_excel writes lmms-eval's table:
    sheet Sheet1, a header of the columns in first-seen order, empty cells for None. Characters an
    xlsx cannot hold (control characters other than tab and newlines) are left out; pandas fails there."""
    from openpyxl import Workbook
    from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE

    book = Workbook()
    sheet = book.active
    sheet.title = "Sheet1"
    columns = list(dict.fromkeys(c for row in rows for c in row))
    if columns:
        sheet.append(columns)
    for row in rows:
        values = [row.get(c) for c in columns]
        sheet.append([ILLEGAL_CHARACTERS_RE.sub("", v) if isinstance(v, str) else v for v in values])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


SUBMISSION_FORMATS.add("mmbench_xlsx", SubmissionFormat(mmbench_entry, xlsx, "xlsx"))


# --- MMMU (mmmu_test) ---------------------------------------------------------------------------


def mmmu_entry(fields: Mapping[str, Any], response: str | None, extraction: Extraction) -> dict[str, str]:
    """{id: answer}, lmms-eval's mmmu_process_results submission: a multiple-choice question's letter
    as MMMU's rules read it ("" when they read none: lmms-eval submits a random letter), an open
    question's first reading by MMMU's rules, as text (lmms-eval's first in set order)."""
    qid = str(_field(fields, "id", "mmmu_json"))
    if _field(fields, "question_type", "mmmu_json") == "multiple-choice":
        return {qid: extraction.value or ""}
    return {qid: str(mmmu_open_readings(_answer(response, extraction))[0])}


def _merged(entries: list[dict[str, str]]) -> bytes:
    return _json({k: v for entry in entries for k, v in entry.items()})


SUBMISSION_FORMATS.add("mmmu_json", SubmissionFormat(mmmu_entry, _merged, "json"))


# --- DocVQA (docvqa_test) -----------------------------------------------------------------------


def docvqa_entry(fields: Mapping[str, Any], response: str | None, extraction: Extraction) -> dict[str, Any]:
    """{questionId (as an integer), answer: the response stripped}: lmms-eval's
    docvqa_test_process_results."""
    qid = _field(fields, "questionId", "docvqa_json")
    try:
        number = int(qid)
    except (TypeError, ValueError):
        raise DocError(f"docvqa_json: questionId {qid!r} is not an integer") from None
    return {"questionId": number, "answer": _answer(response, extraction)}


SUBMISSION_FORMATS.add("docvqa_json", SubmissionFormat(docvqa_entry, _json, "json"))


# --- VQAv2 (vqav2_test) -------------------------------------------------------------------------


def vqav2_entry(fields: Mapping[str, Any], response: str | None, extraction: Extraction) -> dict[str, Any]:
    """{question_id, answer}: lmms-eval's vqav2_process_results submission. Its answer processing
    (tabs and newlines, punctuation, number words, articles) runs only on a doc with annotator answers;
    a test doc has none, so its answer is the response stripped."""
    answer = _answer(response, extraction)
    if fields.get("answers") is not None:
        answer = normalize_vqa_answer(answer)
    return {"question_id": _field(fields, "question_id", "vqav2_json"), "answer": answer}


SUBMISSION_FORMATS.add("vqav2_json", SubmissionFormat(vqav2_entry, _json, "json"))
