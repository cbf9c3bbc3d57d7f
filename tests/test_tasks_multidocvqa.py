"""MP-DocVQA (multidocvqa_val) run by name on a fixture in its hub schema, with lmms-eval 0.7.3's
prompt, pages, result keys and scores (its multidocvqa/utils.py imported and run on the same docs
and answers).

Hub schema: lmms-lab-encoder/MP-DocVQA's card was not available offline. Its columns are those
lmms-eval reads (questionId, question, answers, image_1 .. image_20) plus doc_id, page_ids,
answer_page_idx and data_split, as code loading lmms-lab/MP-DocVQA reads them. Every text column
is a string: lmms-eval parses `answers` with ast.literal_eval and calls int() on `questionId`
(and other loaders on `answer_page_idx`), and `page_ids` is a list written as text; the pages are
`datasets.Image` columns, null past a document's last page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import datasets
import pytest
from peer_lmms_eval import lmms_eval_module
from task_fixtures import (
    assert_renders,
    lmms_eval_prompt,
    lmms_eval_yaml,
    photo,
    prompt_text,
    run_task,
    save_split,
    task_config,
)

from fastmmeval.engine.sampling import cut_at_stop
from fastmmeval.errors import DocError
from fastmmeval.extract import EXTRACTORS
from fastmmeval.metrics.vqa import anls
from fastmmeval.tasks.families.multidocvqa import MAX_PAGES, multidocvqa, multidocvqa_accuracy, multidocvqa_anls

S = datasets.Value("string")
MULTIDOCVQA_VAL = datasets.Features({
    "questionId": S, "question": S, "doc_id": S, "page_ids": S, "answers": S, "answer_page_idx": S,
    "data_split": S, **{f"image_{i}": datasets.Image() for i in range(1, MAX_PAGES + 1)},
})  # fmt: skip

# (question, answers, the pages present (image_N), a right response, a wrong response): one page,
# three, two with a null page between them (lmms-eval skips it), and all twenty.
DOCS = [
    ("What is the date mentioned in this letter?", ["1/8/93", "January 8, 1993"], [1], "1/8/93", "March 1985"),
    ("To whom is the memo addressed?", ["Paul"], [1, 2, 3], "PAUL", "the tobacco institute"),
    ("What is the total on the last page?", ["$ 1,200", "1200"], [1, 3], " $ 1,200 ", "120 dollars"),
    ("Which page lists the attendees?", ["page 17"], list(range(1, MAX_PAGES + 1)), "Page 17", "none"),
]
PEER = "tasks.multidocvqa.utils"


def multidocvqa_val_rows() -> list[dict[str, Any]]:
    rows = []
    for i, (question, answers, pages, _, _) in enumerate(DOCS):
        doc_id = f"{4720 + i}"
        rows.append({
            "questionId": str(49153 + i), "question": question, "doc_id": doc_id,
            "page_ids": str([f"{doc_id}_p{p - 1}" for p in pages]), "answers": str(answers),
            "answer_page_idx": "0", "data_split": "val",
            **{f"image_{n}": photo(i + n, 32) if n in pages else None for n in range(1, MAX_PAGES + 1)},
        })  # fmt: skip
    return rows


def values(results: dict[str, Any]) -> dict[str, float]:
    """The metric values of a task's results, by lmms-eval-style key (without ',none')."""
    return {k.removesuffix(",none"): v for k, v in results.items() if k.endswith(",none") and "stderr" not in k}


def lmms_eval_scores(answers: list[str], response: str) -> dict[str, float]:
    """lmms-eval's anls and accuracy of one response (its process_results, then each aggregation)."""
    peer = lmms_eval_module(PEER)
    doc = {"questionId": "1", "answers": str(answers)}
    item = peer.multidocvqa_process_results(doc, [response])
    return {
        "anls": peer.multidocvqa_aggregate_results_anls([item["anls"]]),
        "accuracy": peer.multidocvqa_aggregate_results_accuracy([item["accuracy"]]),
    }


def test_multidocvqa_val_runs_by_name_with_lmms_eval_prompt_pages_keys_and_scores(tmp_path: Path) -> None:
    data, rows = tmp_path / "data", multidocvqa_val_rows()
    save_split(data, task_config("multidocvqa_val"), rows, MULTIDOCVQA_VAL)
    ids = [str(i) for i in range(len(DOCS))]
    best, samples = run_task(tmp_path, data, "multidocvqa_val", {i: d[-2] for i, d in zip(ids, DOCS, strict=True)}, ids)
    worst, _ = run_task(tmp_path, data, "multidocvqa_val", {i: d[-1] for i, d in zip(ids, DOCS, strict=True)}, ids)

    assert_renders(samples)
    visual = lmms_eval_module(PEER).multidocvqa_doc_to_visual
    for sample, row, doc in zip(samples, rows, DOCS, strict=True):
        text = prompt_text(sample)
        assert text.replace("<image>", "") == lmms_eval_prompt("multidocvqa", "multidocvqa_val.yaml", row)
        assert text.count("<image>") == len(sample["images"]) == len(visual(row)) == len(doc[2])
    reference = lmms_eval_yaml("multidocvqa", "multidocvqa_val.yaml")
    assert {m["metric"] for m in reference["metric_list"]} == set(values(best)) == {"anls", "accuracy"}
    assert values(best) == {"anls": 1.0, "accuracy": 1.0} and values(worst) == {"anls": 0.0, "accuracy": 0.0}


def test_the_pages_are_lmms_eval_pages_in_its_order() -> None:
    def pixels(images: list[Any]) -> list[bytes]:
        return [image.convert("RGB").tobytes() for image in images]

    visual = lmms_eval_module(PEER).multidocvqa_doc_to_visual
    for row, (_, _, pages, _, _) in zip(multidocvqa_val_rows(), DOCS, strict=True):
        ours = multidocvqa(row)["pages"]
        assert pixels(ours) == pixels(visual(row)) == pixels([row[f"image_{n}"] for n in pages])


def test_the_answers_are_read_from_their_list_literal_and_a_broken_one_names_the_field() -> None:
    row = multidocvqa_val_rows()[0]
    assert multidocvqa(row)["answer_list"] == ["1/8/93", "January 8, 1993"]
    for broken in ("1/8/93", "['a', 3]", "{'a': 1}"):
        with pytest.raises(DocError, match="multidocvqa: field 'answers'"):
            multidocvqa({**row, "answers": broken})


# (answers, response): case and surrounding whitespace (ignored), whitespace runs inside (kept),
# the "none" rule (0 even against a reference "none"), empty answers and references, near misses
# around the 0.5 threshold, letters that change length when lower-cased, several references.
TRICKY = [
    (["Paul"], "paul"), (["Paul"], "  PAUL\n"), (["Paul Smith"], "paul  smith"), (["paul  smith"], "Paul Smith"),
    (["none"], "none"), (["none"], "None"), (["None"], " NONE "), (["nothing"], "none"), (["a"], ""),
    ([""], ""), ([""], "x"), (["1/8/93"], "1/8/9"), (["1/8/93"], "1/8"), (["abcdef"], "abcxyz"),
    (["abcdef"], "abxyzw"), (["İstanbul"], "istanbul"), (["straße"], "STRASSE"), (["Straße"], "straße"),
    (["1/8/93", "January 8, 1993"], "january 8 1993"), (["$ 1,200", "1200"], "1,200"), (["ﬁve"], "five"),
    (["tab\tseparated"], "tab separated"), (["café"], "cafe\u0301"), (["12"], "12."), (["x"], "none of these"),
]  # fmt: skip


def test_anls_and_accuracy_equal_lmms_eval_mp_docvqa_evaluator_on_tricky_answers() -> None:
    raw = EXTRACTORS.get("raw")
    ours = {"anls": [], "accuracy": []}
    for answers, response in TRICKY:
        theirs = lmms_eval_scores(answers, response)
        prediction = raw(response).value
        mine = {"anls": multidocvqa_anls(prediction, answers), "accuracy": multidocvqa_accuracy(prediction, answers)}
        assert mine == pytest.approx(theirs, abs=1e-12), (answers, response)
        for key, value in mine.items():
            ours[key].append(value)
    assert 0 < sum(ours["anls"]) < len(TRICKY) and 0 < sum(ours["accuracy"]) < len(TRICKY)  # the cases go both ways
    # Scored as one run, the aggregations are the means of the per-question values.
    peer = lmms_eval_module(PEER)
    items = [peer.multidocvqa_process_results({"questionId": str(i), "answers": str(a)}, [r]) for i, (a, r) in
             enumerate(TRICKY)]  # fmt: skip
    assert peer.multidocvqa_aggregate_results_anls([it["anls"] for it in items]) == pytest.approx(
        sum(ours["anls"]) / len(TRICKY))  # fmt: skip
    assert peer.multidocvqa_aggregate_results_accuracy([it["accuracy"] for it in items]) == pytest.approx(
        sum(ours["accuracy"]) / len(TRICKY))  # fmt: skip


def test_multidocvqa_anls_is_not_docvqa_anls() -> None:
    """MP-DocVQA keeps whitespace runs and scores "none" 0; DocVQA's anls collapses the runs and
    scores "none" like any other answer (the task file's note)."""
    assert multidocvqa_anls("paul  smith", ["Paul Smith"]) == pytest.approx(1 - 1 / 11)
    assert anls("paul  smith", ["Paul Smith"]) == 1.0
    assert multidocvqa_anls("none", ["none"]) == multidocvqa_accuracy("none", ["none"]) == 0.0
    assert anls("none", ["none"]) == 1.0


def test_stop_string_cuts_a_response_lmms_eval_may_score_whole() -> None:
    config = task_config("multidocvqa_val")
    assert "stop_string" in config.lmms_eval.differences
    response = "1/8/93\n\nThe letter is dated 8 January 1993."
    answers = ["1/8/93"]
    cut = cut_at_stop(response, config.generation.stop)
    assert cut == "1/8/93" and multidocvqa_anls(cut, answers) == multidocvqa_accuracy(cut, answers) == 1.0
    assert lmms_eval_scores(answers, response) == {"anls": 0, "accuracy": 0}


def test_multidocvqa_val_reads_lmms_eval_data_and_generation_settings() -> None:
    config, reference = task_config("multidocvqa_val"), lmms_eval_yaml("multidocvqa", "multidocvqa_val.yaml")
    assert (config.dataset.path, config.dataset.name, config.split) == (reference["dataset_path"], None, "val")
    assert reference["test_split"] == "val" and config.docs == 5187
    kwargs = reference["generation_kwargs"]
    assert config.generation.max_new_tokens == kwargs["max_new_tokens"] == 32
    assert config.generation.temperature == kwargs["temperature"] == 0 and config.generation.top_p == 1.0
    assert config.generation.stop == ("\n\n",)  # lmms-eval's default `until` (its fewshot delimiter)
    assert config.lmms_eval.task == "multidocvqa_val" and config.group == ("doc",)
