"""Submission tasks (mmbench_en_test, mmbench_cn_test, mmmu_test, docvqa_test, vqav2_test) run by name
on fixtures of their test splits in the hub schema (answers not public: None, or MMMU's "?") and write
the file their server scores, equal to what lmms-eval 0.7.3's own process_results and aggregation
functions write for the same answers, except where the task file lists a difference; `--predict_only`
runs any task without scoring it.

The test splits' schema is the validation splits' (the hub datasets share their features across
splits); their rows are built by the row builders of test_tasks_mcq, test_tasks_doc and test_tasks_vqa."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import openpyxl
import pytest
from peer_lmms_eval import lmms_eval_module
from task_fixtures import lmms_eval_yaml, prompt_text, run_task, save_split, task_config
from test_tasks_doc import DOCVQA, docvqa_rows
from test_tasks_mcq import MMBENCH, MMMU, lmms, mmbench_rows, mmmu_chat_text, mmmu_row
from test_tasks_vqa import VQAV2_FEATURES, vqav2_row

from fastmmeval.cli import main
from fastmmeval.engine.sampling import cut_at_stop
from fastmmeval.errors import ConfigError
from fastmmeval.extract import Extraction
from fastmmeval.parity import EXPLAINERS, PeerTask
from fastmmeval.parity.harness import peer_prompt_parts, prompt_parts
from fastmmeval.parity.mismatch import Mismatch
from fastmmeval.protocol import Doc, Response
from fastmmeval.tasks.catalog import Catalog
from fastmmeval.tasks.config import parse_task
from fastmmeval.tasks.families.mmmu import mmmu_open_readings
from fastmmeval.tasks.sources import DATA_DIR_ENV
from fastmmeval.tasks.submission import SUBMISSION_FORMATS, vqav2_entry, xlsx
from fastmmeval.tasks.task import Task

SUBMISSION_TASKS = ["docvqa_test", "mmbench_cn_test", "mmbench_en_test", "mmmu_test", "vqav2_test"]


def run_submission(tmp_path: Path, task: str, rows: list[dict[str, Any]], features: Any,
                   answers: dict[str, str], *extra: str) -> tuple[dict[str, Any], list[dict[str, Any]], Path]:
    """Save `rows` as the task's split, run it with a scripted model giving `answers` (by doc id);
    returns its results, samples and submission file."""
    data = tmp_path / "data"
    save_split(data, task_config(task), rows, features)
    results, samples = run_task(tmp_path, data, task, answers, list(answers), *extra)
    run = max((tmp_path / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
    return results, samples, run / results["submission"]["file"]


def lmms_eval_file(tmp_path: Path, aggregate: Any, items: list[Any]) -> Path:
    """The file lmms-eval's aggregation function writes for `items` (under OUTPUT/submissions/)."""
    out = tmp_path / "lmms_eval"
    shutil.rmtree(out, ignore_errors=True)
    aggregate(items, SimpleNamespace(output_path=str(out)))
    (written,) = (out / "submissions").iterdir()
    return written


def cells(path: Path) -> tuple[str, list[tuple[Any, ...]]]:
    """The title and cell values of an xlsx file's one sheet."""
    sheet = openpyxl.load_workbook(path).active
    return sheet.title, list(sheet.iter_rows(values_only=True))


def test_submission_tasks_are_their_own_group_and_list_only_what_applies_to_a_test_split() -> None:
    catalog = Catalog()
    assert sorted(catalog.groups["submission"]) == SUBMISSION_TASKS
    for group in ("mcq", "doc", "vqa"):  # `--tasks mcq` never runs a split it cannot score
        assert not set(SUBMISSION_TASKS) & set(catalog.groups[group])
    for name in SUBMISSION_TASKS:
        config = catalog.tasks.get(name)
        assert config.split == "test" and config.metrics == () and config.submission in SUBMISSION_FORMATS
        assert config.lmms_eval.task == name
        assert lmms_eval_yaml(*_lmms_file(name))["test_split"] == "test"


def _lmms_file(task: str) -> tuple[str, str]:
    folder = task.split("_")[0]
    return folder, f"{task}.yaml"


def test_each_submission_task_keeps_its_dev_or_val_task_s_prompt_and_generation_but_mmmu_s_tokens() -> None:
    catalog = Catalog()
    for test, val in [("mmbench_en_test", "mmbench_en_dev"), ("mmbench_cn_test", "mmbench_cn_dev"),
                      ("mmmu_test", "mmmu_val"), ("docvqa_test", "docvqa_val"), ("vqav2_test", "vqav2_val")]:
        a, b = catalog.tasks.get(test), catalog.tasks.get(val)
        assert a.doc_to_messages == b.doc_to_messages and a.dataset == b.dataset, test
        tokens = lmms_eval_yaml(*_lmms_file(test))["generation_kwargs"]["max_new_tokens"]
        assert a.generation.max_new_tokens == tokens, test
    assert catalog.tasks.get("mmmu_test").generation.max_new_tokens == 512 != 128


def mmbench_test_rows() -> list[dict[str, Any]]:
    return [{**row, "split": "test", "answer": None} for row in mmbench_rows()]


MMBENCH_ANSWERS = {"0": " A\n", "1000000": "The answer is D. A cat", "1": "Coffee", "2": "B", "1000002": "(A)"}


@pytest.mark.parametrize("task", ["mmbench_en_test", "mmbench_cn_test"])
def test_mmbench_test_writes_lmms_eval_s_xlsx(tmp_path: Path, task: str) -> None:
    results, samples, written = run_submission(tmp_path, task, mmbench_test_rows(), MMBENCH, MMBENCH_ANSWERS)
    assert results["submission"] == {"file": f"submissions/{task}.xlsx", "predictions": 5}
    assert results["metrics"] == {} and results["n_failed"] == 0
    utils = lmms(f"mmbench.{task.split('_')[1]}_utils")
    items = [utils.mmbench_process_results(row, [MMBENCH_ANSWERS[str(row["index"])].strip()])["submission"]
             for row in mmbench_test_rows()]  # fmt: skip
    assert [s["submission"] for s in samples] == items
    theirs = lmms_eval_file(tmp_path, utils.mmbench_aggregate_test_results, items)
    assert cells(written) == cells(theirs)
    title, table = cells(written)
    assert title == "Sheet1" and table[0] == ("index", "question", "answer", "prediction", "hint", "source", "split",
                                              "category", "L2-category", "A", "B", "C", "D", "E")  # fmt: skip
    assert table[1][3] == "A"  # the response stripped
    assert table[3][2] is None and table[3][12] is None and table[3][13] == "nan"  # no answer, no D, no E column


def mmmu_test_rows() -> list[dict[str, Any]]:
    return [
        mmmu_row("test_Art_Theory_1", "<image 1> Which art movement is this painting from?",
                 "['Cubism', 'Impressionism', 'Baroque', 'Pop art']", "?", "multiple-choice", 1),
        mmmu_row("test_Biology_2", "Which photo shows a cat?", "['<image 1>', '<image 2>', '<image 3>']", "?",
                 "multiple-choice", 3),
        mmmu_row("test_Math_3", "How many coins are in <image 1>?", "[]", "?", "open", 1),
        mmmu_row("test_Physics_4", "<image 2> and <image 1> show the same object. What is it?", "[]", "?", "open", 2),
        mmmu_row("test_Math_5", "What is the sum in <image 1>?", "[]", "?", "open", 1),
    ]  # fmt: skip


MMMU_ANSWERS = {
    "test_Art_Theory_1": "The answer is (B).",
    "test_Biology_2": "I am not sure.",  # unparsed_not_random: no letter found
    "test_Math_3": "12",
    "test_Physics_4": "It is a rocket",
    "test_Math_5": "The answer is 12\nThe answer is 3",  # open_answer_first_reading: two readings, 12.0 and 3.0
}


def test_mmmu_test_writes_lmms_eval_s_json_except_where_it_picks_at_random_or_in_set_order(tmp_path: Path) -> None:
    results, samples, written = run_submission(tmp_path, "mmmu_test", mmmu_test_rows(), MMMU, MMMU_ANSWERS)
    assert results["submission"] == {"file": "submissions/mmmu_test.json", "predictions": 5}
    utils = lmms("mmmu.utils")
    items = [utils.mmmu_process_results(row, [MMMU_ANSWERS[row["id"]].strip()])["submission"]
             for row in mmmu_test_rows()]  # fmt: skip
    ours = [s["submission"] for s in samples]
    assert ours[0] == items[0] == {"test_Art_Theory_1": "B"}
    assert ours[1] == {"test_Biology_2": ""} and items[1]["test_Biology_2"] in ("A", "B", "C")  # a random letter
    assert ours[2:4] == items[2:4] == [{"test_Math_3": "12.0"}, {"test_Physics_4": "a rocket"}]  # one reading each
    # The readings of the last answer are floats, whose set order does not depend on the hash seed: 3.0 first.
    assert mmmu_open_readings(MMMU_ANSWERS["test_Math_5"]) == [12.0, 3.0]
    assert ours[4] == {"test_Math_5": "12.0"} and items[4] == {"test_Math_5": "3.0"}
    theirs = lmms_eval_file(tmp_path, utils.mmmu_test_aggregate_results_for_submission, ours)
    assert written.read_bytes() == theirs.read_bytes()  # json.dump's bytes, from the same entries


def test_mmmu_test_prompt_is_mmmu_val_s_not_lmms_eval_mmmu_test_s(tmp_path: Path, monkeypatch) -> None:
    _, samples, _ = run_submission(tmp_path, "mmmu_test", mmmu_test_rows(), MMMU, MMMU_ANSWERS)
    utils = lmms("mmmu.utils")
    monkeypatch.setitem(utils.config["metadata"], "interleaved_format", False)  # mmmu_test's own setting
    for row, sample in zip(mmmu_test_rows(), samples, strict=True):
        # mmmu_test_prompt: lmms-eval's mmmu_test has no kwargs (no instruction) and no doc_to_messages (images
        # first, tags kept); ours is what its chat models get for mmmu_val.
        images = len(utils.mmmu_doc_to_visual(row))
        theirs = "<image>" * images + utils.mmmu_doc_to_text(row)
        assert prompt_text(sample) == mmmu_chat_text(row) != theirs
        assert theirs.endswith("\n\n") and "<image 1>" in theirs


DOCVQA_ANSWERS = {"0": "1/8/93", "1": " Paul \n", "2": "página tres"}  # by doc id: DocVQA's is the row index


def test_docvqa_test_writes_lmms_eval_s_json(tmp_path: Path) -> None:
    rows = [{**row, "answers": None, "data_split": "test"} for row in docvqa_rows()]
    results, samples, written = run_submission(tmp_path, "docvqa_test", rows, DOCVQA, DOCVQA_ANSWERS)
    assert results["submission"] == {"file": "submissions/docvqa_test.json", "predictions": 3}
    test = lmms_eval_module("tasks.docvqa.utils")
    # lmms-eval's generate tasks strip each response before process_results sees it.
    items = [test.docvqa_test_process_results(row, [DOCVQA_ANSWERS[str(i)].strip()])["submission"]
             for i, row in enumerate(rows)]  # fmt: skip
    assert [s["submission"] for s in samples] == items  # questionId an integer
    assert written.read_bytes() == lmms_eval_file(tmp_path, test.docvqa_test_aggregate_results, items).read_bytes()
    assert json.loads(written.read_text())[1] == {"questionId": 49151, "answer": "Paul"}


def vqav2_test_rows() -> list[dict[str, Any]]:
    rows = [vqav2_row(1, "What color is the cat?", ["x"], 1), vqav2_row(2, "How many cups are there?", ["x"], 2),
            vqav2_row(3, "Is this a rocket?", ["x"], 3)]  # fmt: skip
    return [{**row, "answers": None, "multiple_choice_answer": None, "answer_type": None} for row in rows]


VQAV2_ANSWERS = {"1": "Orange.", "2": "Two\n", "3": "yes"}


def test_vqav2_test_writes_lmms_eval_s_json_with_the_answers_as_generated(tmp_path: Path) -> None:
    results, samples, written = run_submission(tmp_path, "vqav2_test", vqav2_test_rows(), VQAV2_FEATURES, VQAV2_ANSWERS)
    assert results["submission"] == {"file": "submissions/vqav2_test.json", "predictions": 3}
    utils = lmms_eval_module("tasks.vqav2.utils")
    items = [utils.vqav2_process_results_test(row, [VQAV2_ANSWERS[str(row["question_id"])].strip()])["submission"]
             for row in vqav2_test_rows()]  # fmt: skip
    assert [s["submission"] for s in samples] == items
    assert items[:2] == [{"question_id": 1, "answer": "Orange."}, {"question_id": 2, "answer": "Two"}]  # stripped only
    assert written.read_bytes() == lmms_eval_file(tmp_path, utils.vqav2_aggregate_submissions, items).read_bytes()


def test_a_vqav2_doc_with_annotator_answers_submits_the_answer_as_lmms_eval_normalizes_it() -> None:
    utils = lmms_eval_module("tasks.vqav2.utils")
    row = vqav2_row(7, "How many cups are there?", ["2"] * 10, 2)
    for response in ["Two cups.", "\tthe  TWO\n", "2"]:
        doc = json.loads(json.dumps(row, default=str))  # it rewrites the doc's answers
        expected = utils.vqav2_process_results(doc, [response.strip()])["submission"]
        assert vqav2_entry(row, response, Extraction(response.strip(), "raw")) == expected


def test_a_resumed_submission_run_rebuilds_the_whole_file_from_its_samples(tmp_path: Path) -> None:
    rows = [{**row, "answers": None} for row in docvqa_rows()]
    _, _, written = run_submission(tmp_path, "docvqa_test", rows, DOCVQA, DOCVQA_ANSWERS)
    whole = written.read_bytes()
    samples = written.parent.parent / "samples" / "docvqa_test.jsonl"
    samples.write_text(samples.read_text().splitlines(keepends=True)[0])  # killed after the first doc
    written.unlink()
    (answers,) = tmp_path.glob("answers_*.json")  # the same settings as the run resumed
    rc = main(["run", "--model", "scripted_student", "--model_args", f"answers={answers}", "--tasks", "docvqa_test",
               "--data_dir", str(tmp_path / "data"), "--output_path", str(tmp_path / "runs"), "--no_progress",
               "--bootstrap_iters", "0", "--resume", str(written.parent.parent)])  # fmt: skip
    assert rc == 0 and written.read_bytes() == whole
    assert not list(written.parent.glob(".*.tmp"))


def test_predict_only_answers_every_doc_and_scores_none(tmp_path: Path) -> None:
    rows = [{**row, "split": "dev"} for row in mmbench_rows()]
    rows[2]["answer"] = None  # a doc without a target is answered, not failed
    answers = {"0": "A", "1000000": "D", "1": "No idea", "2": "B", "1000002": "A"}
    data = tmp_path / "data"
    save_split(data, task_config("mmbench_en_dev"), rows, MMBENCH)
    # No --judge_model: the judge-assisted extraction of mmbench_en_dev reads with its rules alone.
    results, samples = run_task(tmp_path, data, "mmbench_en_dev", answers, list(answers), "--predict_only")
    assert results["metrics"] == {} and results["headline_metric"] is None and results["n_failed"] == 0
    assert not [k for k in results if k.endswith(",none")]
    assert [s["response"] for s in samples] == list(answers.values())
    assert [s["extracted"] for s in samples] == ["A", "D", None, "B", "A"]
    assert all("metrics" not in s and "target" not in s for s in samples)
    run = max((tmp_path / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
    assert json.loads((run / "manifest.json").read_text())["config"]["predict_only"] is True
    assert not (run / "submissions").exists()


def test_a_submission_task_with_metrics_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("task: t\ndataset: {path: a/b}\nsplit: test\ndoc_to_messages: [{role: user, content: "
                    "[{text: hi}]}]\ntarget: a\noutput_type: generate\nextractor: raw\nmetrics: [exact_match]\n"
                    "submission: docvqa_json\n")  # fmt: skip
    with pytest.raises(ConfigError, match=r"t.yaml:8: field 'metrics': a submission task has no metrics"):
        parse_task(path)


def test_the_xlsx_leaves_out_characters_an_xlsx_cannot_hold(tmp_path: Path) -> None:
    path = tmp_path / "s.xlsx"
    path.write_bytes(xlsx([{"index": 1, "prediction": "A\x1b[0m\tB"}, {"index": 2, "prediction": None}]))
    assert cells(path) == ("Sheet1", [("index", "prediction"), (1, "A[0m\tB"), (2, None)])


def submission_mismatch(task: Task, peer: PeerTask, doc: Doc, row: dict[str, Any], text: str) -> Mismatch | None:
    """Our submission entry for the response `text` (cut at the task's stop strings, as our backends
    return it) against lmms-eval's (its process_results on the response, stripped as its evaluator
    strips it), as the parity harness compares a result key; None when they are equal."""
    cut = cut_at_stop(text, task.config.generation.stop)
    sample = task.predict(doc, Response(f"{task.name}/{doc.id}", text=text if cut is None else cut))

    def theirs_with(transform: Callable[[str], str]) -> Any:
        return peer.process(row, transform(text))["none"]["submission"]

    theirs = theirs_with(lambda t: t)
    if sample["submission"] == theirs:
        return None
    return Mismatch("score", "submission", (doc.id,), (text,), sample["submission"], theirs, theirs_with, (sample,))


# task: (its fixture rows, their features, extra responses by doc id beside the answers of its file test above)
PARITY = {
    "mmbench_en_test": (mmbench_test_rows, MMBENCH, MMBENCH_ANSWERS, {"2": ["B\nASSISTANT: A"]}),
    "mmbench_cn_test": (mmbench_test_rows, MMBENCH, MMBENCH_ANSWERS, {"2": ["B\n\n解释：A 不对。"]}),
    "mmmu_test": (mmmu_test_rows, MMMU, MMMU_ANSWERS, {"test_Math_3": ["12\n\nBecause there are 3 rows of 4."]}),
    "docvqa_test": (lambda: [{**r, "answers": None} for r in docvqa_rows()], DOCVQA, DOCVQA_ANSWERS,
                    {"1": ["Paul\n\nIt is addressed to him."]}),
    "vqav2_test": (vqav2_test_rows, VQAV2_FEATURES, VQAV2_ANSWERS, {"3": ["yes\n\nIt has fins."]}),
}  # fmt: skip


@pytest.mark.parametrize("name", SUBMISSION_TASKS)
def test_each_difference_from_lmms_eval_s_prompt_and_submission_is_listed_and_shown(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the parity test does for scored tasks: every disagreement with lmms-eval's test task (a prompt,
    a submission entry) is explained by a difference the task file lists, and each listed one explains one."""
    rows, features, answers, extra = PARITY[name]
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    save_split(tmp_path, task_config(name), rows(), features)
    task, peer = Task(task_config(name)), PeerTask.load(name)
    docs = [task.doc(ref) for ref in task.doc_refs()]
    mismatches = [
        Mismatch("prompt", "prompt", (doc.id,), (), ours, theirs)
        for doc, row in zip(docs, rows(), strict=True)
        if (ours := prompt_parts(task.request(doc, seed=0))) != (theirs := peer_prompt_parts(peer, row))
    ]
    for doc, row in zip(docs, rows(), strict=True):
        for text in [answers[doc.id], *extra.get(doc.id, [])]:
            mismatches += [m for m in [submission_mismatch(task, peer, doc, row, text)] if m is not None]
    listed = task.config.lmms_eval.differences
    for m in mismatches:
        m.explained_by = [d for d in listed if EXPLAINERS.get(d)(m, task)]
    assert all(m.explained_by for m in mismatches), [m.describe() for m in mismatches if not m.explained_by]
    assert {d for m in mismatches for d in m.explained_by} == set(listed), [m.describe() for m in mismatches]
