"""The doc family (ChartQA, DocVQA, InfographicVQA, OCRBench and their Lite subsets) run by name
on fixtures in their hub schemas, with lmms-eval 0.7.3's prompts, result keys and scoring.

Hub schemas are the dataset cards' `dataset_info` features: lmms-lab(-encoder)/ChartQA and the
LMMs-Eval-Lite `chartqa` config (type, question, answer: string, image); lmms-lab(-encoder)/DocVQA
configs DocVQA and InfographicVQA (below); echo840/OCRBench (dataset, question, question_type:
string, answer: list of strings, image). The Lite configs `docvqa_val` and `infovqa_val` are
assumed to keep the full configs' columns (their cards were not available offline); lmms-eval
reads only `question`, `answers` and `image` there."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
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

from fastmmeval.extract import EXTRACTORS
from fastmmeval.metrics import METRICS
from fastmmeval.metrics.vqa import anls
from fastmmeval.tasks.families.doc import OCRBENCH_CATEGORIES, ocrbench_aggregate, ocrbench_score

S, SEQ, IMAGE = datasets.Value("string"), datasets.Sequence(datasets.Value("string")), datasets.Image()

CHARTQA = datasets.Features({"type": S, "question": S, "answer": S, "image": IMAGE})
DOCVQA = datasets.Features({
    "questionId": S, "question": S, "question_types": SEQ, "image": IMAGE, "docId": datasets.Value("int64"),
    "ucsf_document_id": S, "ucsf_document_page_no": S, "answers": SEQ, "data_split": S,
})  # fmt: skip
INFOVQA = datasets.Features({
    "questionId": S, "question": S, "answers": SEQ, "answer_type": SEQ, "image": IMAGE, "image_url": S,
    "operation/reasoning": SEQ, "ocr": S, "data_split": S,
})  # fmt: skip
OCRBENCH = datasets.Features({"dataset": S, "question": S, "question_type": S, "answer": SEQ, "image": IMAGE})

# (type, question, answer, a right response, a wrong response): the right ones exercise the 5%
# tolerance, case-insensitive text and percentages; the wrong ones miss just outside them.
CHARTQA_DOCS = [
    ("human_test", "How many bars are above 30?", "3", "3", "4"),
    ("augmented_test", "What is the value of the red line in 2019?", "12.5", "12.9", "13.2"),
    ("human_test", "Which country has the highest share?", "Germany", "germany", "Germany."),
    ("augmented_test", "What share of people said yes?", "45%", "0.45", "50%"),
]
# (question, answers, a right response, a wrong response)
DOCVQA_DOCS = [
    ("What is the date mentioned in this letter?", ["1/8/93", "January 8, 1993"], "1/8/93", "March 1985"),
    ("To whom is the document sent?", ["Paul"], "PAUL", "the tobacco institute"),
    ("What is the page number?", ["iii", "3"], "3", "page fourteen"),
]
INFOVQA_DOCS = [
    ("Which social platform has heavy female audience?", ["pinterest"], "Pinterest", "LinkedIn"),
    ("What percentage of people use the internet daily?", ["76%", "76"], "76%", "12 percent"),
    ("How many steps are shown?", ["5", "five"], "five", "twelve"),
]
# (dataset, question_type, question, answers, a right response, a wrong response): the right
# responses exercise containment, case and full-width folding, and HME100k's space removal.
OCRBENCH_DOCS = [
    ("IIIT5K", "Regular Text Recognition", "what is written in the image?", ["CENTRE"], "The word is centre.",
     "center"),
    ("HME100k", "Handwritten Mathematical Expression Recognition", "Please write out the expression of the formula in "
     "the image using LaTeX format. ", ["x ^ { 2 } + 1"], "x^{2}+1", "X^{2}+1"),
    ("FUNSD", "Key Information Extraction", "\nWhat is the name of the sender? ", ["Smith"], "ＳＭＩＴＨ", "Smyth"),
    ("docVQA", "Doc-oriented VQA", "What is the total amount?", ["$ 1,200", "1200"], "It is 1200 dollars.", "120"),
    ("textVQA", "Scene Text-centric VQA", "what brand is on the sign?", ["coca cola"], "Coca\nCola", "pepsi"),
]  # fmt: skip


def chartqa_rows() -> list[dict[str, Any]]:
    return [
        {"type": t, "question": q, "answer": a, "image": photo(i, 64)} for i, (t, q, a, _, _) in enumerate(CHARTQA_DOCS)
    ]


def docvqa_rows() -> list[dict[str, Any]]:
    return [
        {"questionId": str(49150 + i), "question": q, "question_types": ["handwritten", "form"], "image": photo(i, 64),
         "docId": 14465 + i, "ucsf_document_id": f"txpp00{i}", "ucsf_document_page_no": "1", "answers": a,
         "data_split": "val"}
        for i, (q, a, _, _) in enumerate(DOCVQA_DOCS)
    ]  # fmt: skip


def infovqa_rows() -> list[dict[str, Any]]:
    return [
        {"questionId": str(98310 + i), "question": q, "answers": a, "answer_type": ["single span"],
         "image": photo(i + 3, 64), "image_url": f"https://example.org/{i}.jpg", "operation/reasoning": [],
         "ocr": "", "data_split": "val"}
        for i, (q, a, _, _) in enumerate(INFOVQA_DOCS)
    ]  # fmt: skip


def ocrbench_rows() -> list[dict[str, Any]]:
    return [
        {"dataset": d, "question": q, "question_type": t, "answer": a, "image": photo(i + 5, 64)}
        for i, (d, t, q, a, _, _) in enumerate(OCRBENCH_DOCS)
    ]


# task: (lmms-eval task folder, its YAML, the hub features, the fixture rows, the docs: each ends
# with a right and a wrong response)
FAMILY = {
    "chartqa": ("chartqa", "chartqa.yaml", CHARTQA, chartqa_rows, CHARTQA_DOCS),
    "docvqa_val": ("docvqa", "docvqa_val.yaml", DOCVQA, docvqa_rows, DOCVQA_DOCS),
    "infovqa_val": ("infovqa", "infovqa_val.yaml", INFOVQA, infovqa_rows, INFOVQA_DOCS),
    "ocrbench": ("ocrbench", "ocrbench.yaml", OCRBENCH, ocrbench_rows, OCRBENCH_DOCS),
}
LITE = {"chartqa_lite": "chartqa", "docvqa_val_lite": "docvqa_val", "infovqa_val_lite": "infovqa_val"}
# ocrbench's count keys (after `ocrbench_`): the total, the six recognition categories' sum, then
# one per category in OCRBENCH_CATEGORIES' order.
OCRBENCH_COUNT_KEYS = [
    "final_score", "text_recognition", "regular_text_recognition", "irregular_text_recognition",
    "artistic_text_recognition", "handwriting_recognition", "digit_string_recognition", "non_semantic_text_recognition",
    "scene_text_centric_vqa", "doc_oriented_vqa", "key_information_extraction",
    "handwritten_mathematical_expression_recognition",
]  # fmt: skip


def values(results: dict[str, Any]) -> dict[str, float]:
    """The metric values of a task's results, by lmms-eval-style key (without ',none')."""
    return {k.removesuffix(",none"): v for k, v in results.items() if k.endswith(",none") and "stderr" not in k}


@pytest.mark.parametrize("task", list(FAMILY))
def test_a_doc_task_runs_by_name_with_lmms_eval_prompt_keys_and_score_range(tmp_path: Path, task: str) -> None:
    folder, yaml_file, features, rows, docs = FAMILY[task]
    config, data = task_config(task), tmp_path / "data"
    save_split(data, config, rows(), features)
    ids = [str(i) for i in range(len(docs))]
    best, samples = run_task(tmp_path, data, task, {i: d[-2] for i, d in zip(ids, docs, strict=True)}, ids)
    worst, _ = run_task(tmp_path, data, task, {i: d[-1] for i, d in zip(ids, docs, strict=True)}, ids)
    best, worst = values(best), values(worst)

    assert_renders(samples)
    for sample, row in zip(samples, rows(), strict=True):
        assert prompt_text(sample).replace("<image>", "").strip() == lmms_eval_prompt(folder, yaml_file, row)
    reference = lmms_eval_yaml(folder, yaml_file)
    assert {m["metric"] for m in reference["metric_list"]} <= set(best)  # lmms-eval's result keys
    if task == "ocrbench":  # accuracy, then OCRBench's per-category counts of questions right
        assert best["ocrbench_accuracy"] == 1.0 and worst["ocrbench_accuracy"] == 0.0
        assert best["ocrbench_final_score"] == len(docs) and best["ocrbench_text_recognition"] == 1
        assert all(worst[f"ocrbench_{k}"] == 0 for k in OCRBENCH_COUNT_KEYS)
    else:
        assert set(best.values()) == {1.0} and set(worst.values()) == {0.0}, (best, worst)


@pytest.mark.parametrize("task", list(FAMILY))
def test_a_doc_task_reads_lmms_eval_data_and_generation_settings(task: str) -> None:
    folder, yaml_file, *_ = FAMILY[task]
    config, reference = task_config(task), lmms_eval_yaml(folder, yaml_file)
    wanted = reference["dataset_path"], reference.get("dataset_name"), reference["test_split"]
    assert (config.dataset.path, config.dataset.name, config.split) == wanted
    kwargs = reference["generation_kwargs"]
    assert config.generation.max_new_tokens == kwargs["max_new_tokens"]
    assert config.generation.temperature == kwargs["temperature"] == 0
    assert config.generation.top_p == kwargs.get("top_p", 1.0)
    assert config.generation.stop == ("\n\n",)  # lmms-eval's default `until` (its fewshot delimiter)
    assert config.lmms_eval is not None and config.lmms_eval.task == task and config.lmms_eval.differences
    assert "doc" in config.group


@pytest.mark.parametrize("lite", list(LITE))
def test_a_lite_task_is_its_full_task_on_lmms_eval_lite_data(lite: str) -> None:
    full = LITE[lite]
    folder, yaml_file, _, rows, _ = FAMILY[full]
    ours, theirs = task_config(lite), task_config(full)
    reference = lmms_eval_yaml(folder, f"{lite}.yaml")
    protocol = ("doc_to_messages", "target", "output_type", "extractor", "metrics", "metric_keys", "generation",
                "process_doc", "where", "doc_id")  # fmt: skip
    assert all(getattr(ours, k) == getattr(theirs, k) for k in protocol)
    assert ours.lmms_eval.differences == theirs.lmms_eval.differences and ours.lmms_eval.task == lite
    wanted = reference["dataset_path"], reference["dataset_name"].strip(), reference["test_split"], 500
    assert (ours.dataset.path, ours.dataset.name, ours.split, ours.docs) == wanted
    assert ours.group == ("lmms_eval_lite",)  # the doc group holds the full task
    assert reference["generation_kwargs"] == lmms_eval_yaml(folder, yaml_file)["generation_kwargs"]
    doc = rows()[1]
    assert lmms_eval_prompt(folder, f"{lite}.yaml", doc) == lmms_eval_prompt(folder, yaml_file, doc)


def test_chartqa_scores_and_splits_as_lmms_eval_process_results() -> None:
    peer = lmms_eval_module("tasks.chartqa.utils").chartqa_process_results
    metric, raw = METRICS.get("chartqa_relaxed"), EXTRACTORS.get("raw")
    docs = [{"type": t, "answer": a} for t, _, a, _, _ in CHARTQA_DOCS]
    responses = ["3", "3.0", "2.9", "12.5", "0.125", "13.1", "GERMANY", "45", "0.45", "45.0%", "1,234", "nan", "yes"]
    items, theirs = [], {"relaxed_overall": [], "relaxed_human_split": [], "relaxed_augmented_split": []}
    for doc in docs:
        for response in responses:
            items.append(metric.score(raw(response).value, [doc["answer"]], doc))
            for key, value in peer(doc, [response]).items():
                theirs[key].append(value)
            assert items[-1]["score"] == theirs["relaxed_overall"][-1], (doc, response)
    ours = metric.aggregate(items)
    assert ours == {k.removeprefix("relaxed_"): pytest.approx(sum(v) / len(v)) for k, v in theirs.items()}
    # lmms-eval scores the response unstripped, the raw extractor strips it (a listed difference):
    # this matters for text and percentages only, as float() ignores surrounding whitespace.
    for doc, response in ((docs[2], " Germany"), (docs[3], "45%\n")):
        assert peer(doc, [response])["relaxed_overall"] == 0.0 and peer(docs[0], [" 3\n"])["relaxed_overall"] == 1.0
        assert metric.score(raw(response).value, [doc["answer"]], doc)["score"] == 1.0


# (dataset, answers, response): containment, case, full-width forms and the ideographic space,
# newlines, stripping on both sides, HME100k's case-sensitive space-free match, empty answers.
OCRBENCH_TRICKY = [
    ("IIIT5K", ["CENTRE"], "centre"), ("IIIT5K", ["CENTRE"], "CENTRE"), ("IIIT5K", ["CENTRE"], "cent re"),
    ("IIIT5K", ["CENTRE"], "ｃｅｎｔｒｅ"), ("IIIT5K", ["CENTRE"], "\u3000centre\u3000"), ("IIIT5K", ["CENTRE"], ""),
    ("IIIT5K", ["ＣＥＮＴＲＥ"], "Centre"), ("IIIT5K", ["  centre  "], "centre"), ("IIIT5K", ["cen tre"], "cen\ntre"),
    ("IIIT5K", ["cen\ntre"], "cen tre"), ("IIIT5K", ["cen  tre"], "cen tre"), ("IIIT5K", ["İstanbul"], "istanbul"),
    ("IIIT5K", ["straße"], "STRASSE"), ("IIIT5K", ["café"], "cafe"), ("IIIT5K", [""], "anything"),
    ("IIIT5K", ["a", "CENTRE"], "the centre"), ("ReCTS", ["中国银行"], "这是中国银行。"), ("ReCTS", ["１２３"], "123"),
    ("HME100k", ["x ^ { 2 } + 1"], "x^{2}+1"), ("HME100k", ["x ^ { 2 } + 1"], "X^{2}+1"),
    ("HME100k", ["x ^ { 2 }\n+ 1"], " x^{2} +1 "), ("HME100k", ["x^{2}+1"], "$x ^ {2}\t+1$"),
    ("HME100k", ["ｘ"], "x"), ("HME100k", ["\\frac { a } { b }"], "\\frac{a}{b} is it"),
    ("textVQA", ["coca cola"], "Coca\nCola"), ("textVQA", ["coca cola"], "Coca\n\nCola"),
    ("textVQA", ["coca cola"], "coca\tcola"), ("docVQA", ["$ 1,200", "1200"], "1,200"),
]  # fmt: skip


def test_ocrbench_scores_tricky_responses_and_counts_categories_as_lmms_eval(tmp_path: Path, monkeypatch) -> None:
    peer = lmms_eval_module("tasks.ocrbench.utils")
    raw = EXTRACTORS.get("raw")
    categories = iter(OCRBENCH_CATEGORIES * 3)
    ours, theirs = [], []
    for dataset, answers, response in OCRBENCH_TRICKY:
        doc = {"dataset": dataset, "answer": answers, "question_type": next(categories)}
        ours.append(ocrbench_score(raw(response).value, answers, doc))
        theirs.append(peer.ocrbench_process_results(doc, [response])["ocrbench_accuracy"])
        assert ours[-1]["score"] == theirs[-1]["score"], (dataset, answers, response)
    assert sum(item["score"] for item in ours) not in (0, len(ours))  # the cases go both ways
    # lmms-eval's aggregation adds into a module-level dict (never reset) and writes the counts to a report.
    monkeypatch.setattr(peer, "OCRBench_score", dict.fromkeys(OCRBENCH_CATEGORIES, 0))
    accuracy = peer.ocrbench_aggregate_accuracy(theirs, SimpleNamespace(output_path=str(tmp_path)))
    report = (tmp_path / "results" / "ocrbench_results.txt").read_text()
    counts = {name: int(n) for name, n in re.findall(r"^(.+?)\(Total \d+\): (\d+)$", report, re.MULTILINE)}
    aggregate = ocrbench_aggregate(ours)
    assert aggregate["final_score"] == counts["Final Score"]
    assert accuracy == pytest.approx(counts["Final Score"] / 1000)  # lmms-eval divides by 1000 whatever was run
    assert aggregate["accuracy"] == pytest.approx(counts["Final Score"] / len(ours))  # we divide by the docs run
    assert aggregate["text_recognition"] == counts["Text Recognition"]
    assert {c: aggregate[k] for c, k in zip(OCRBENCH_CATEGORIES, OCRBENCH_COUNT_KEYS[2:], strict=True)} == {
        c: counts[c] for c in OCRBENCH_CATEGORIES
    }


def test_docvqa_anls_differs_from_lmms_eval_only_by_its_raw_length_division() -> None:
    peer = lmms_eval_module("api.metrics").anls
    for _, answers, right, wrong in DOCVQA_DOCS + INFOVQA_DOCS:
        for response in (right, wrong):
            assert anls(response, answers) == pytest.approx(peer(answers, [response])["anls"])
    # A reference with doubled spaces: lmms-eval divides the distance by its raw length (13), we by
    # the normalized one (11), so lmms-eval's similarity is higher (a listed difference).
    reference, response = ["the  big  dog"], "the big cat"
    assert peer(reference, [response])["anls"] == pytest.approx(1 - 3 / 13)
    assert anls(response, reference) == pytest.approx(1 - 3 / 11)
