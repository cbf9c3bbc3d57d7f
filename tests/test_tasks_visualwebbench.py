"""VisualWebBench's seven sub-tasks (the `visualwebbench` group) run by name on fixtures in their hub
schema, with lmms-eval 0.7.3's prompts, result keys and scores: its tasks/visualwebbench/utils.py
(process_results, aggregations, parse_multi_choice_response, and through it the `rouge` package
1.0.1) imported and run on the same docs and responses.

Hub schema: lmms-lab-encoder/VisualWebBench (a copy of visualwebbench/VisualWebBench), one config per
sub-task, split test. Every config has id, task_type, website (strings), image (the annotated
screenshot) and image_size (int64 list). The card's dataset_info seen offline gives action_ground
(raw_image: image, options: lists of float64 boxes, instruction: string, answer: int64) and
action_prediction (options: list of strings, bbox: list of float64, elem_desc: string, answer:
int64). The others are assumed from what lmms-eval reads and how the benchmark's own loader built
them: element_ground as action_ground with elem_desc for instruction; element_ocr with bbox (float64
list), elem_desc and answer (string); heading_ocr and web_caption with answer (string) only; webqa
with question (string) and answer (list of strings). Doc counts (`docs:`) are the paper's (Table 1),
not counted from the data."""

from __future__ import annotations

from functools import cache
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
from fastmmeval.metrics import METRICS
from fastmmeval.metrics.caption import rouge_l_score
from fastmmeval.tasks.catalog import Catalog
from fastmmeval.tasks.config import TaskConfig
from fastmmeval.tasks.families.visualwebbench import choice_letter, rouge_f

PEER = "tasks.visualwebbench.utils"
S, INT, IMAGE = datasets.Value("string"), datasets.Value("int64"), datasets.Image()
FLOATS = datasets.Sequence(datasets.Value("float64"))
BOXES = datasets.Sequence(FLOATS)
COMMON = {"id": S, "task_type": S, "website": S, "image": IMAGE, "image_size": datasets.Sequence(INT)}

VISUALWEBBENCH_WEB_CAPTION = datasets.Features({**COMMON, "answer": S})
VISUALWEBBENCH_HEADING_OCR = datasets.Features({**COMMON, "answer": S})
VISUALWEBBENCH_WEBQA = datasets.Features({**COMMON, "question": S, "answer": datasets.Sequence(S)})
VISUALWEBBENCH_ELEMENT_OCR = datasets.Features({**COMMON, "bbox": FLOATS, "elem_desc": S, "answer": S})
VISUALWEBBENCH_ELEMENT_GROUND = datasets.Features({
    **COMMON, "raw_image": IMAGE, "options": BOXES, "elem_desc": S, "answer": INT,
})  # fmt: skip
VISUALWEBBENCH_ACTION_PREDICTION = datasets.Features({
    **COMMON, "options": datasets.Sequence(S), "bbox": FLOATS, "elem_desc": S, "answer": INT,
})  # fmt: skip
VISUALWEBBENCH_ACTION_GROUND = datasets.Features({
    **COMMON, "raw_image": IMAGE, "options": BOXES, "instruction": S, "answer": INT,
})  # fmt: skip

# Per sub-task: (the fields that differ between docs, a right response, a wrong response). The right
# text responses repeat the answer (99.999999 on each ROUGE: F = 2PR / (P + R + 1e-8)); the wrong ones
# share no word with it (case counts).
TEXT_DOCS = {
    "web_caption": [
        ({"answer": "Running news, training plans and gear reviews for runners of every level."},
         "Running news, training plans and gear reviews for runners of every level.", "Cheap flights to Rome"),
        ({"answer": "The official site of the city library. Opening hours, events and the catalogue"},
         "The official site of the city library. Opening hours, events and the catalogue", "buy shoes now"),
    ],
    "heading_ocr": [
        ({"answer": "Welcome to Green Valley Farm"}, "Welcome to Green Valley Farm", "welcome"),
        ({"answer": "Spring Sale: 30% off"}, "Spring Sale: 30% off", "Contact us"),
        ({"answer": "About the project"}, "About the project", "Sign in"),
    ],
    "element_ocr": [
        ({"bbox": [0.2, 0.39, 0.8, 0.41], "elem_desc": "the subscribe paragraph",
          "answer": "Subscribe to our newsletter for weekly updates"},
         "Subscribe to our newsletter for weekly updates", "Log in"),
        ({"bbox": [0.013, 0.5, 0.487, 0.527], "elem_desc": "the footer note",
          "answer": "All rights reserved. Terms of use"}, "All rights reserved. Terms of use", "x"),
    ],
    "webqa": [
        ({"question": "What is the price of the blue jacket?", "answer": ["$49.99", "49.99 dollars"]}, "$49.99", "$12"),
        ({"question": "Who wrote the featured article?", "answer": ["Jane Doe"]}, "Jane Doe", "John Smith"),
        ({"question": "How many comments are there?", "answer": ["12", "twelve"]}, "twelve", ""),
    ],
}  # fmt: skip
CHOICE_DOCS = {
    "element_ground": [
        ({"options": [[0.1, 0.1, 0.2, 0.15], [0.3, 0.4, 0.5, 0.45]], "elem_desc": "The search button", "answer": 1},
         "B", "A"),
        ({"options": [[0.0, 0.0, 0.1, 0.1], [0.2, 0.2, 0.3, 0.3], [0.5, 0.5, 0.6, 0.6]],
          "elem_desc": "A link to the cart page", "answer": 2}, "(C)", "I am not sure"),
    ],
    "action_prediction": [
        ({"options": ["Home - Green Valley Farm", "Shop | Green Valley Farm", "Contact us"],
          "bbox": [0.42, 0.05, 0.5, 0.08], "elem_desc": "Shop link", "answer": 1}, "B.", "C."),
        ({"options": ["Login", "Sign up", "Help center", "Careers"], "bbox": [0.9, 0.02, 0.98, 0.06],
          "elem_desc": "Sign up button", "answer": 3}, "The answer is D", "A\n"),
    ],
    "action_ground": [
        ({"options": [[0.1, 0.1, 0.2, 0.15], [0.3, 0.4, 0.5, 0.45]], "instruction": "Open the settings", "answer": 0},
         "a", "b"),
        ({"options": [[0.0, 0.0, 0.1, 0.1], [0.2, 0.2, 0.3, 0.3]], "instruction": "Search for running shoes",
          "answer": 1}, "Click B", "(A) then (B) and (A)"),
    ],
}  # fmt: skip
DOCS = {**TEXT_DOCS, **CHOICE_DOCS}
RAW_IMAGE_TASKS = ("element_ground", "action_ground")
FIXED_PROMPT = ("web_caption", "heading_ocr")  # a prompt without slots: every doc reads the same text
# lmms-eval's result keys per sub-task, and the process_results hook that computes them.
PROCESS_RESULTS = {
    "web_caption": "rouge", "heading_ocr": "rouge", "element_ocr": "rouge", "webqa": "f1",
    "element_ground": "accuracy", "action_prediction": "accuracy", "action_ground": "accuracy",
}  # fmt: skip


def _rows(sub_task: str) -> list[dict[str, Any]]:
    rows = []
    for i, (fields, _, _) in enumerate(DOCS[sub_task]):
        row = {"id": f"{sub_task}_{i + 1}", "task_type": sub_task, "website": f"www.site{i}.example",
               "image": photo(i, 64), "image_size": [1280, 720], **fields}  # fmt: skip
        if sub_task in RAW_IMAGE_TASKS:
            row["raw_image"] = photo(i + 3, 64)
        rows.append(row)
    return rows


def visualwebbench_web_caption_rows() -> list[dict[str, Any]]:
    return _rows("web_caption")


def visualwebbench_heading_ocr_rows() -> list[dict[str, Any]]:
    return _rows("heading_ocr")


def visualwebbench_webqa_rows() -> list[dict[str, Any]]:
    return _rows("webqa")


def visualwebbench_element_ocr_rows() -> list[dict[str, Any]]:
    return _rows("element_ocr")


def visualwebbench_element_ground_rows() -> list[dict[str, Any]]:
    return _rows("element_ground")


def visualwebbench_action_prediction_rows() -> list[dict[str, Any]]:
    return _rows("action_prediction")


def visualwebbench_action_ground_rows() -> list[dict[str, Any]]:
    return _rows("action_ground")


FEATURES = {
    "web_caption": VISUALWEBBENCH_WEB_CAPTION, "heading_ocr": VISUALWEBBENCH_HEADING_OCR,
    "webqa": VISUALWEBBENCH_WEBQA, "element_ocr": VISUALWEBBENCH_ELEMENT_OCR,
    "element_ground": VISUALWEBBENCH_ELEMENT_GROUND, "action_prediction": VISUALWEBBENCH_ACTION_PREDICTION,
    "action_ground": VISUALWEBBENCH_ACTION_GROUND,
}  # fmt: skip


def values(results: dict[str, Any]) -> dict[str, float]:
    """The metric values of a task's results, by lmms-eval-style key (without ',none')."""
    return {k.removesuffix(",none"): v for k, v in results.items() if k.endswith(",none") and "stderr" not in k}


def lmms_eval_run(sub_task: str, docs: list[dict[str, Any]], responses: list[str]) -> dict[str, float]:
    """lmms-eval's values for the docs answered with the responses: its process_results per doc on
    the stripped response (ConfigurableTask.process_results strips generated text before calling
    it), then each metric's aggregation, as its evaluator runs them."""
    peer = lmms_eval_module(PEER)
    process = getattr(peer, f"visualwebbench_process_results_{PROCESS_RESULTS[sub_task]}")
    items = [process(doc, [response.strip()]) for doc, response in zip(docs, responses, strict=True)]
    return {key: getattr(peer, f"visualwebbench_{key}_aggregate")([it[key] for it in items]) for key in items[0]}


@cache
def config_of(task: str) -> TaskConfig:
    """The built-in task file (read once: the catalog reads every task file)."""
    return task_config(task)


def ours(task: str, doc: dict[str, Any], response: str) -> dict[str, float]:
    """Our values of one doc's response: the task's extractor, then each of its metrics, by result key."""
    config = config_of(task)
    extracted = EXTRACTORS.get(config.extractor)(response, (), doc).value
    answer = doc["answer"]
    targets = [str(a) for a in answer] if isinstance(answer, list) else [str(answer)]
    return {
        key: METRICS.get(name).score(extracted, targets, doc)
        for name, key in zip(config.metrics, config.metric_keys, strict=True)
    }


@pytest.mark.parametrize("sub_task", list(DOCS))
def test_a_sub_task_runs_by_name_with_lmms_eval_prompts_keys_and_scores(tmp_path: Path, sub_task: str) -> None:
    task, rows = f"visualwebbench_{sub_task}", _rows(sub_task)
    data = tmp_path / "data"
    save_split(data, task_config(task), rows, FEATURES[sub_task])
    ids = [str(i) for i in range(len(rows))]
    right, wrong = ([d[k] for d in DOCS[sub_task]] for k in (1, 2))
    best, samples = run_task(tmp_path, data, task, dict(zip(ids, right, strict=True)), ids)
    worst, _ = run_task(tmp_path, data, task, dict(zip(ids, wrong, strict=True)), ids)

    if sub_task not in FIXED_PROMPT:
        assert_renders(samples)
    for sample, row in zip(samples, rows, strict=True):
        assert prompt_text(sample) == "<image>" + lmms_eval_prompt("visualwebbench", f"{task}.yaml", row)
        assert len(sample["images"]) == len(lmms_eval_module(PEER).visualwebbench_doc_to_visual(row)) == 1
    reference = lmms_eval_yaml("visualwebbench", f"{task}.yaml")
    assert [m["metric"] for m in reference["metric_list"]] == list(values(best))  # lmms-eval's result keys, in order
    assert values(best) == pytest.approx(lmms_eval_run(sub_task, rows, right), abs=1e-9)
    assert values(worst) == pytest.approx(lmms_eval_run(sub_task, rows, wrong), abs=1e-9)
    assert min(values(best).values()) > 99.99 and max(values(worst).values()) == 0.0


def test_the_screenshot_shown_is_lmms_eval_image_not_the_raw_one() -> None:
    visual = lmms_eval_module(PEER).visualwebbench_doc_to_visual
    for sub_task in RAW_IMAGE_TASKS:
        config = task_config(f"visualwebbench_{sub_task}")
        for row in _rows(sub_task):
            assert config.doc_to_messages[0].parts[0] == ("image", "image") and visual(row) == [row["image"]]


# (answer, response): the rouge package's quirks. Sentences are cut at every "." and n-grams run
# across them; a whitespace-only piece between periods (". .") is one empty word; whitespace runs
# collapse; each n-gram counts once; case is kept; an empty response is " "; the LCS is traced back
# in the package's order (repeated words); ROUGE-L counts distinct words; the response is stripped.
ROUGE_TRICKY = [
    ("Hello world", "Hello world"), ("Hello world", "hello world"), ("Hello world", "Hello world."),
    ("Hello world", "Hello world. "), ("Hello world", "Hello. world"), ("Hello. world", "Hello world"),
    ("Home. . About", " "), ("Home. . About", ""), ("Home. . About", "Home. . x"), ("a b", "a  b\n"),
    ("a b", "\ta b"), ("a a a b", "a b"),
    ("a b a b", "b a b a"), ("the cat the dog", "the dog the cat"), ("x y z", "z y x"), ("a b c", "a"),
    ("a", "a b c"), ("New York, NY", "New York"), ("3.5 stars", "3 5 stars"), ("e.g. this", "eg this"),
    ("Shop now!", "Shop now"), ("naïve café", "naive cafe"), ("A B", "A B A B A B"),
    ("one two three four five six", "one three five two four six"), ("a b. c d", "c d. a b"), ("..a", "a"),
]  # fmt: skip
ROUGE_TASKS = ("web_caption", "heading_ocr", "element_ocr")


@pytest.mark.parametrize("sub_task", ROUGE_TASKS)
def test_rouge_equals_lmms_eval_and_the_rouge_package_on_tricky_responses(sub_task: str) -> None:
    task = f"visualwebbench_{sub_task}"
    docs = [{"task_type": sub_task, "answer": answer} for answer, _ in ROUGE_TRICKY]
    responses = [response for _, response in ROUGE_TRICKY]
    mine = [ours(task, doc, response) for doc, response in zip(docs, responses, strict=True)]
    for doc, response, value in zip(docs, responses, mine, strict=True):
        assert value == lmms_eval_run(sub_task, [doc], [response]), (doc["answer"], response)
    assert {0.0} < {v["rouge_l"] for v in mine} and max(v["rouge_1"] for v in mine) < 100  # the cases go both ways
    run = {key: sum(v[key] for v in mine) / len(mine) for key in mine[0]}
    assert run == pytest.approx(lmms_eval_run(sub_task, docs, responses), abs=1e-9)


def test_element_ocr_reads_a_one_character_response_as_empty_as_lmms_eval_does() -> None:
    doc = {"task_type": "element_ocr", "answer": "A. B"}
    for response in ("A", " A\n"):  # one character once stripped
        assert ours("visualwebbench_element_ocr", doc, response) == lmms_eval_run("element_ocr", [doc], [response])
        assert ours("visualwebbench_element_ocr", doc, response)["rouge_1"] == 0.0
    caption = {"task_type": "heading_ocr", "answer": "A. B"}
    assert ours("visualwebbench_heading_ocr", caption, "A")["rouge_1"] > 0  # the other two score it


def test_this_rouge_is_not_the_captioning_tasks_rouge_l() -> None:
    """pycocoevalcap's ROUGE-L (beta 1.2, no sentence cut, repeated words counted) differs from the
    rouge package's on the same pair (the task files' note)."""
    package = 100 * rouge_f("a a a b", "a b")["rouge_l"]
    assert package == pytest.approx(100.0, abs=1e-5) and rouge_l_score("a a a b", ["a b"]) < 0.9


# (answers, response) for WebQA's best ROUGE-1 over the answers.
WEBQA_TRICKY = [
    (["$49.99", "49.99 dollars"], "49.99"), (["$49.99", "49.99 dollars"], "$49.99"), (["Jane Doe"], "jane doe"),
    (["Jane Doe"], "Jane Doe."), (["12", "twelve"], "Twelve comments"), (["12", "twelve"], ""), (["a b"], "a  b "),
    (["New York", "NYC"], "New York City, NY"), (["yes"], "Yes"), (["the 3rd floor"], "3rd floor"),
]  # fmt: skip


def test_webqa_f1_equals_lmms_eval_on_tricky_responses() -> None:
    docs = [{"task_type": "webqa", "answer": answers} for answers, _ in WEBQA_TRICKY]
    responses = [response for _, response in WEBQA_TRICKY]
    mine = [ours("visualwebbench_webqa", doc, r)["f1_score"] for doc, r in zip(docs, responses, strict=True)]
    for doc, response, value in zip(docs, responses, mine, strict=True):
        assert value == lmms_eval_run("webqa", [doc], [response])["f1_score"], (doc["answer"], response)
    assert 0 in mine and max(mine) > 99.99 and any(0 < v < 99 for v in mine)
    assert sum(mine) / len(mine) == pytest.approx(lmms_eval_run("webqa", docs, responses)["f1_score"], abs=1e-9)


def test_a_response_of_periods_scores_zero_where_lmms_eval_stops_the_run() -> None:
    """The task files' note: the rouge package finds no sentence in '.' or '...' and raises;
    lmms-eval's process_results (webqa: its aggregation, by zero) lets it stop the run."""
    for sub_task in (*ROUGE_TASKS, "webqa"):
        config = task_config(f"visualwebbench_{sub_task}")
        answer = ["Jane Doe"] if sub_task == "webqa" else "Jane Doe"
        doc = {"task_type": sub_task, "answer": answer}
        with pytest.raises((ValueError, ZeroDivisionError)):
            lmms_eval_run(sub_task, [doc], ["..."])
        assert set(ours(config.task, doc, "...").values()) == {0.0}
    # An answer made only of periods: lmms-eval's webqa stops; here the other answers count.
    doc = {"task_type": "webqa", "answer": ["...", "Jane Doe"]}
    with pytest.raises(ZeroDivisionError):
        lmms_eval_run("webqa", [doc], ["Jane Doe"])
    assert ours("visualwebbench_webqa", doc, "Jane Doe")["f1_score"] > 99.99


# Responses for the choice tasks: one character (any case, not a letter, two-letter upper case), "X."
# at the very start only, brackets before spaced letters, the last one found, letters past H, a letter
# next to a newline or a tab (not between spaces), punctuation deleted before matching.
CHOICE_TRICKY = [
    "B", "b", "h", "I", "z", "1", " ", "", "ß", "ı", "B.", "B. The second one", " B.", "b.", "(B)", "(b)", "B)",
    "The answer is C", "A or B", "B or A", "(A) then (B) and (A)", "(C) or D", "A\n", "\nA", "A\tB", "I think E",
    "Answer: F.", "Option G!", "H, surely", "It is (I)", "I. no", "J. maybe", "A B C D E F G H", "'B'", '"C"',
    "[D]", "**E**", "The element labeled F is the one", "CD", "none of them",
]  # fmt: skip


def test_the_choice_letter_equals_lmms_eval_parse_multi_choice_response() -> None:
    parse = lmms_eval_module(PEER).parse_multi_choice_response
    for response in CHOICE_TRICKY:
        theirs = parse(response, list("ABCDEFGH"))
        letter, _ = choice_letter(response)
        readable = len(theirs) == 1 and "A" <= theirs <= "Z"
        assert letter == (theirs if readable else None), response


@pytest.mark.parametrize("sub_task", list(CHOICE_DOCS))
def test_choice_accuracy_equals_lmms_eval_on_tricky_responses(sub_task: str) -> None:
    task = f"visualwebbench_{sub_task}"
    docs = [{"task_type": sub_task, "answer": answer} for answer in range(10)]
    cases = [(doc, response) for doc in docs for response in CHOICE_TRICKY]
    mine = [ours(task, doc, response)["accuracy"] for doc, response in cases]
    for (doc, response), value in zip(cases, mine, strict=True):
        assert value == lmms_eval_run(sub_task, [doc], [response])["accuracy"], (doc["answer"], response)
    assert {0.0, 100.0} == set(mine)
    theirs = lmms_eval_run(sub_task, [d for d, _ in cases], [r for _, r in cases])["accuracy"]
    assert sum(mine) / len(mine) == pytest.approx(theirs, abs=1e-9)


def test_a_choice_answer_that_is_no_index_names_the_doc_field() -> None:
    with pytest.raises(DocError, match="visualwebbench: the answer must be an option index, got 'B'"):
        METRICS.get("visualwebbench_accuracy").score("B", ["B"], {})


@pytest.mark.parametrize("sub_task", ["web_caption", "webqa", "action_ground"])
def test_stop_string_cuts_a_response_lmms_eval_may_score_whole(sub_task: str) -> None:
    task = f"visualwebbench_{sub_task}"
    config = task_config(task)
    assert "stop_string" in config.lmms_eval.differences and config.generation.stop == ("\n\n",)
    doc = {"task_type": sub_task, "answer": {"webqa": ["Jane Doe"], "action_ground": 1}.get(sub_task, "Jane Doe")}
    response = {"action_ground": "B\n\nor maybe C"}.get(sub_task, "Jane Doe\n\nwrote the article on 3 May")
    cut = cut_at_stop(response, config.generation.stop)
    assert ours(task, doc, cut) != lmms_eval_run(sub_task, [doc], [response])
    assert ours(task, doc, response) == lmms_eval_run(sub_task, [doc], [response])


@pytest.mark.parametrize("sub_task", list(DOCS))
def test_a_visualwebbench_task_reads_lmms_eval_data_and_generation_settings(sub_task: str) -> None:
    task = f"visualwebbench_{sub_task}"
    config, reference = task_config(task), lmms_eval_yaml("visualwebbench", f"{task}.yaml")
    wanted = reference["dataset_path"], reference["dataset_name"], reference["test_split"]
    assert (config.dataset.path, config.dataset.name, config.split) == wanted
    kwargs = reference["generation_kwargs"]
    assert config.generation.max_new_tokens == kwargs["max_new_tokens"] == 16
    assert config.generation.temperature == kwargs["temperature"] == 0 and config.generation.top_p == kwargs["top_p"]
    assert "until" not in kwargs and config.generation.stop == ("\n\n",)  # lmms-eval's default `until`
    assert config.lmms_eval.task == reference["task"] == task and config.target == "answer"
    assert config.group == ("web", "visualwebbench")


def test_the_visualwebbench_group_is_lmms_eval_seven_sub_tasks() -> None:
    folder = Path(lmms_eval_module(PEER).__file__).parent
    theirs = sorted(p.stem for p in folder.glob("visualwebbench_*.yaml"))
    assert sorted(Catalog().groups["visualwebbench"]) == theirs == sorted(f"visualwebbench_{t}" for t in DOCS)
    docs = {t: task_config(f"visualwebbench_{t}").docs for t in DOCS}
    assert sum(docs.values()) == 1536  # the paper's 1.5K instances
