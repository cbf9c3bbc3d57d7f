"""The judge family (MM-Vet, LLaVA-Bench in-the-wild, MathVista testmini) run by name on fixtures in
their hub schemas, with lmms-eval 0.7.3's prompts and result keys; MM-Vet and LLaVA-W graded by
tests/judge_fixtures.py's scripted judge through `--judge_config`, as a real judge would be.

Hub schemas (the dataset cards were not available offline; columns are the ones lmms-eval's
utils read plus the rest of each card as remembered): lmms-lab-encoder/MMVet (question_id,
image, question, answer, image_source, capability: strings, capability comma-separated);
lmms-lab-encoder/llava-bench-in-the-wild (question_id int8, question, image, caption, gpt_answer,
category, image_id); AI4Math/MathVista (pid, question, image path, decoded_image, choices list,
unit, precision float64, answer, question_type, answer_type, metadata struct, query)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import datasets
import pytest
from peer_lmms_eval import lmms_eval_module
from task_fixtures import (
    assert_renders,
    judge_queries,
    lmms_eval_prompt,
    lmms_eval_yaml,
    photo,
    prompt_text,
    run_task,
    save_split,
    task_config,
)

from fastmmeval.extract import EXTRACTORS
from fastmmeval.judge.judge import Verdict
from fastmmeval.judge.pipeline import judged_score
from fastmmeval.metrics import METRICS
from fastmmeval.metrics.base import JUDGE_VERDICT
from fastmmeval.protocol import Response
from fastmmeval.tasks.families.mathvista import get_most_similar
from fastmmeval.tasks.task import Task

S, IMAGE = datasets.Value("string"), datasets.Image()
MMVET = datasets.Features({"question_id": S, "image": IMAGE, "question": S, "answer": S, "image_source": S,
                           "capability": S})  # fmt: skip
LLAVA_W = datasets.Features({"question_id": datasets.Value("int8"), "question": S, "image": IMAGE, "caption": S,
                             "gpt_answer": S, "category": S, "image_id": S})  # fmt: skip
MATHVISTA = datasets.Features({
    "pid": S, "question": S, "image": S, "decoded_image": IMAGE, "choices": datasets.Sequence(S), "unit": S,
    "precision": datasets.Value("float64"), "answer": S, "question_type": S, "answer_type": S,
    "metadata": {"category": S, "context": S, "grade": S, "img_height": datasets.Value("int64"),
                 "img_width": datasets.Value("int64"), "language": S, "skills": datasets.Sequence(S), "source": S,
                 "split": S, "task": S},
    "query": S,
})  # fmt: skip

# (question, answer, capability)
MMVET_DOCS = [
    ("What is the man holding?", "a helmet", "rec"),
    ("What is the total price of the two items?", "14<OR>$14", "ocr,math"),
    ("Which space agency does this astronaut belong to?", "NASA", "rec,know"),
    ("Where is the cat relative to the table?", "on the left<AND>below", "ocr,spat,gen"),
]
# (question, gpt_answer, category)
LLAVA_W_DOCS = [
    ("What is the person in the photo wearing?", "The person is wearing a white space suit.", "conv"),
    ("Describe this photo in detail.", "The photo shows a cat lying on a striped blanket, looking at the camera.",
     "detail"),
    ("Why might this rocket launch be dangerous?", "Rocket launches involve huge amounts of fuel burning at once.",
     "complex"),
    ("How many coffee cups are there?", "There is one coffee cup on a saucer.", "conv"),
]  # fmt: skip
# (question, choices, unit, precision, answer, question_type, answer_type, a right response, a wrong response)
MATHVISTA_DOCS = [
    ("Which shape is the largest?", ["circle", "square", "triangle"], None, None, "square", "multi_choice", "text",
     "B", "The answer is A."),
    ("How many objects are left?", None, None, None, "3", "free_form", "integer", "3", "4"),
    ("What is the length of the rod?", None, "cm", 1.0, "2.5", "free_form", "float", "2.5 cm", "2.4"),
    ("What is the ratio of the two bars?", None, None, 2.0, "0.67", "free_form", "float", "0.667", "0.7"),
    ("Between which two years is the peak?", None, None, None, "[2007, 2008]", "free_form", "list",
     "[2007, 2008]", "[2008, 2009]"),
]  # fmt: skip


def mmvet_rows() -> list[dict[str, Any]]:
    return [{"question_id": f"v1_{i}", "image": photo(i, 48), "question": q, "answer": a,
             "image_source": f"v1_{i}.png", "capability": c} for i, (q, a, c) in enumerate(MMVET_DOCS)]  # fmt: skip


def llava_w_rows() -> list[dict[str, Any]]:
    return [{"question_id": i, "question": q, "image": photo(i, 48), "caption": f"A photo, number {i}.",
             "gpt_answer": a, "category": c, "image_id": f"{i:03d}"}
            for i, (q, a, c) in enumerate(LLAVA_W_DOCS)]  # fmt: skip


def mathvista_rows() -> list[dict[str, Any]]:
    return [
        {"pid": str(i + 1), "question": q, "image": f"images/{i + 1}.jpg", "decoded_image": photo(i, 48),
         "choices": c, "unit": u, "precision": p, "answer": a, "question_type": qt, "answer_type": at,
         "metadata": {"category": "math-targeted-vqa", "context": "synthetic scene", "grade": "elementary school",
                      "img_height": 48, "img_width": 48, "language": "english", "skills": ["arithmetic reasoning"],
                      "source": "CLEVR-Math", "split": "testmini", "task": "math word problem"},
         "query": f"Question: {q}"}
        for i, (q, c, u, p, a, qt, at, _, _) in enumerate(MATHVISTA_DOCS)
    ]  # fmt: skip


# task: (lmms-eval task folder, its YAML, the hub features, the fixture rows, right and wrong responses)
FAMILY = {
    "mmvet": ("mmvet", "mmvet.yaml", MMVET, mmvet_rows, [d[1] for d in MMVET_DOCS], ["I cannot tell."] * 4),
    "llava_in_the_wild": ("llava-in-the-wild", "llava-in-the-wild.yaml", LLAVA_W, llava_w_rows,
                          [d[1] for d in LLAVA_W_DOCS], ["A picture."] * 4),
    "mathvista_testmini": ("mathvista", "mathvista_testmini_format.yaml", MATHVISTA, mathvista_rows,
                           [d[7] for d in MATHVISTA_DOCS], [d[8] for d in MATHVISTA_DOCS]),
}  # fmt: skip


@pytest.fixture(autouse=True)
def _openai_key_for_lmms_eval_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    """lmms-eval's mmvet and mathvista modules build an OpenAI client on import; it is never called."""
    monkeypatch.setenv("OPENAI_API_KEY", "unused-by-these-tests")


@pytest.fixture
def judge(tmp_path: Path) -> list[str]:
    """The CLI flags that grade a run with the scripted judge."""
    config = tmp_path / "judges.json"
    config.write_text(json.dumps({"judges": [{"name": "scripted", "model": "scripted_judge"}]}))
    return ["--judge_config", str(config)]


def values(results: dict[str, Any]) -> dict[str, float]:
    """The metric values of a task's results, by lmms-eval-style key (without ',none')."""
    return {k.removesuffix(",none"): v for k, v in results.items() if k.endswith(",none") and "stderr" not in k}


@pytest.mark.parametrize("task", list(FAMILY))
def test_a_judge_task_reads_lmms_eval_data_and_generation_settings(task: str) -> None:
    folder, yaml_file, *_ = FAMILY[task]
    config, reference = task_config(task), lmms_eval_yaml(folder, yaml_file)
    assert (config.dataset.path, config.dataset.name, config.split) == (
        reference["dataset_path"],
        reference.get("dataset_name"),
        reference["test_split"],
    )
    kwargs = reference["generation_kwargs"]
    assert config.generation.max_new_tokens == kwargs["max_new_tokens"]
    assert config.generation.temperature == kwargs.get("temperature", 0)
    assert config.generation.top_p == kwargs.get("top_p", 1.0)
    assert config.generation.stop == tuple(kwargs.get("until", ()))  # without one, lmms-eval's default "\n\n":
    assert "until" in kwargs or any("No stop string" in n for n in config.lmms_eval.notes)
    assert config.lmms_eval is not None and config.lmms_eval.differences and config.group == ("judge",)
    assert config.lmms_eval.task == reference["task"] == (task if task != "mathvista_testmini" else f"{task}_format")


@pytest.mark.parametrize("task", list(FAMILY))
def test_a_judge_task_runs_by_name_with_lmms_eval_prompt_keys_and_score_range(
    tmp_path: Path, task: str, judge: list[str]
) -> None:
    folder, yaml_file, features, rows, right, wrong = FAMILY[task]
    config, data = task_config(task), tmp_path / "data"
    save_split(data, config, rows(), features)
    ids = [str(r.get("question_id", r.get("pid"))) for r in rows()]
    best, samples = run_task(tmp_path, data, task, dict(zip(ids, right, strict=True)), ids, *judge)
    worst, _ = run_task(tmp_path, data, task, dict(zip(ids, wrong, strict=True)), ids, *judge)
    if task != "mathvista_testmini":  # every doc judged, none failed
        assert sum(best["n_judged"].values()) == len(ids) and not any(best["failed_judgments"].values())
    best, worst = values(best), values(worst)

    assert_renders(samples)
    for sample, row in zip(samples, rows(), strict=True):
        assert prompt_text(sample).replace("<image>", "") == lmms_eval_prompt(folder, yaml_file, row)
    reference = lmms_eval_yaml(folder, yaml_file)
    assert {m["metric"] for m in reference["metric_list"]} <= set(best)  # lmms-eval's result keys
    assert set(best.values()) == {100.0}, best
    # The scripted judge rates a wrong LLaVA-W answer 2 against the reference's 8: 25, its lowest.
    assert set(worst.values()) == {25.0 if task == "llava_in_the_wild" else 0.0}, worst
    if task == "mmvet":
        assert set(best) == {"gpt_eval_score", *(f"gpt_eval_{c}" for c in ("rec", "ocr", "know", "gen", "spat",
                                                                           "math"))}  # fmt: skip
    if task == "llava_in_the_wild":
        assert set(best) == {f"gpt_eval_llava_{c}" for c in ("all", "conv", "detail", "complex")}


def test_mmvet_scores_and_capabilities_equal_lmms_eval_aggregation(monkeypatch: pytest.MonkeyPatch) -> None:
    peer = lmms_eval_module("tasks.mmvet.utils")
    logged: list[str] = []
    monkeypatch.setattr(peer, "eval_logger", type("Log", (), {"info": staticmethod(logged.append)}))
    metric = METRICS.get("mmvet_capabilities")
    grades = [0.0, 0.5, 1.0, 0.3]
    graded = list(zip(mmvet_rows(), grades, strict=True))
    items = [metric.score("answer", [row["answer"]], {**row, JUDGE_VERDICT: g}) for row, g in graded]
    theirs = [{"score": g, "capabilities": row["capability"]} for row, g in graded]
    ours = metric.aggregate(items)
    assert ours["score"] == pytest.approx(peer.mmvet_aggregate_results(theirs))
    # It logs the six capabilities first, then the capability combinations (one of them also named "rec").
    logged_scores = dict(re.findall(r"Score for (\w+): ([\d.]+)", "\n".join(logged))[:6])
    capabilities = [c for c in ours if c != "score"]
    assert {c: f"{ours[c]:.2f}" for c in capabilities} == {c: logged_scores[c] for c in capabilities}


def test_llava_w_scores_equal_lmms_eval_aggregation_per_category() -> None:
    peer = lmms_eval_module("tasks.llava-in-the-wild.utils")
    metric = METRICS.get("llava_w_categories")
    ratings = [(8, 7), (9, 4), (7, 8), (6, 6)]
    items = [metric.score("answer", [row["gpt_answer"]], {**row, JUDGE_VERDICT: {"reference": r, "answer": a}})
             for row, (r, a) in zip(llava_w_rows(), ratings, strict=True)]  # fmt: skip
    theirs: dict[str, list[dict]] = {}
    for row, scores in zip(llava_w_rows(), ratings, strict=True):
        for key in ("all", "conv", "detail", "complex"):  # as its process_results: -999 outside the doc's category
            other = key not in ("all", row["category"])
            theirs.setdefault(key, []).append({"scores": [-999, -999] if other else list(scores)})
    ours = metric.aggregate(items)
    assert ours == pytest.approx({k: peer.llava_aggregation(v, k) for k, v in theirs.items()}, abs=0.05)


def test_mathvista_reads_and_scores_plain_answers_as_lmms_eval_without_its_judge(monkeypatch) -> None:
    """Answers lmms-eval's rules take directly (a choice's text, a bare number): the same verdict,
    except on float answers, which lmms-eval 0.7.3 always scores wrong (a listed difference). Its
    GPT extraction is made to fail loudly, so these answers never reach it."""
    peer = lmms_eval_module("tasks.mathvista.utils")
    monkeypatch.setattr(peer.mathvista_evaluator, "get_chat_response", lambda *a, **k: pytest.fail("asked GPT"))
    extract, metric = EXTRACTORS.get("mathvista_judge"), METRICS.get("mathvista_accuracy")
    # pid: {response: our verdict}
    plain = {"1": {"square": 100.0, "circle": 0.0, "triangle": 0.0}, "2": {"3": 100.0, "4": 0.0, "03": 100.0},
             "3": {"2.5": 100.0, "2.50": 100.0, "2.46": 100.0, "3": 0.0},
             "4": {"0.67": 100.0, "0.671": 100.0, "0.666": 100.0, "1": 0.0}}  # fmt: skip
    for row in mathvista_rows():
        for response, verdict in plain.get(row["pid"], {}).items():
            ours = metric.score(extract(response, (), row).value, [row["answer"]], row)
            theirs = peer.mathvista_process_results(row, [response])["llm_as_judge_eval"]
            assert ours == verdict, (row["pid"], response)
            if row["answer_type"] == "float":
                # It rounds to the dataset's float64 `precision` (round(x, 1.0): TypeError, caught): unreadable.
                assert theirs["prediction"] is None and theirs["true_false"] is False
            else:
                assert ours == 100.0 * theirs["true_false"], (row["pid"], response)


def test_the_mmvet_judge_is_asked_and_read_exactly_as_lmms_eval_asks_and_reads(tmp_path: Path, monkeypatch) -> None:
    """lmms-eval's own mmvet_process_results, with its GPT call replaced by a recorder, sends the
    same query our judge gets, and reads the same grade from the same reply."""
    peer = lmms_eval_module("tasks.mmvet.utils")
    sent: list[str] = []
    reply = "0.6 (partly right)"

    def gpt(prompt: str, temperature: float = 0.0) -> tuple[str, str]:
        sent.append(prompt)
        return reply, "gpt"

    monkeypatch.setattr(peer, "get_chat_response", gpt)
    answer = lambda r: f"I think it is {r['answer']}."  # noqa: E731
    asked = judge_queries(monkeypatch, tmp_path, "mmvet", mmvet_rows(), MMVET, answer)
    for row, pred, [(_, prompt, case)] in asked:
        theirs = peer.mmvet_process_results(row, [pred])["gpt_eval_score"]["score"]
        assert prompt.id == "mmvet_official@1" and prompt.system == ""
        assert prompt.render(case) == sent[-1]
        assert prompt.read(reply, case) == theirs == 0.6


def test_the_llava_bench_judge_is_asked_and_read_exactly_as_lmms_eval_asks_and_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """lmms-eval's own llava_process_results, with its judge pipeline replaced by a recorder that
    parses with lmms-eval's own reader, sends the same query (captions as context) and reads the
    same two ratings from the same reply."""
    peer = lmms_eval_module("tasks.llava-in-the-wild.utils")
    sent: list[str] = []
    reply = "7, 4\nAssistant 2 misses the point."

    def pipeline(question: str, prediction: str, ground_truth: str, content: str) -> Any:
        sent.append(content)
        return peer._parse_comparative_scores(reply)

    monkeypatch.setattr(peer, "_get_pipeline", lambda: pipeline)
    answer = lambda r: f"My answer to: {r['question']}"  # noqa: E731
    for row, pred, [(_, prompt, case)] in judge_queries(monkeypatch, tmp_path, "llava_in_the_wild", llava_w_rows(),
                                                        LLAVA_W, answer):  # fmt: skip
        theirs = peer.llava_process_results(row, [pred])["gpt_eval_llava_all"]["scores"]
        assert prompt.id == "llava_bench_review@1" and prompt.system == ""
        assert prompt.render(case) == sent[-1] and row["caption"] in sent[-1]
        assert prompt.read(reply, case) == {"reference": theirs[0], "answer": theirs[1]}
        assert theirs == [7, 4]


def test_the_mathvista_extraction_judge_is_asked_and_read_as_lmms_eval_asks_and_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer the rules leave to the judge: lmms-eval's own mathvista_process_results, with its
    GPT call replaced by a recorder, sends our judge's query and turns the same reply into the same
    prediction (float answers aside: lmms-eval 0.7.3 cannot normalize them, a listed difference)."""
    peer = lmms_eval_module("tasks.mathvista.utils")
    sent: list[str] = []
    replies = {"1": "B", "2": "3", "3": "2.5", "4": "0.667", "5": "[2007, 2008]"}
    pred = "Looking at the figure closely, I would say the answer is as follows."
    task = Task(task_config("mathvista_testmini"))
    asked = judge_queries(monkeypatch, tmp_path, "mathvista_testmini", mathvista_rows(), MATHVISTA, lambda r: pred)
    for row, _, [(use, prompt, case)] in asked:
        reply = replies[row["pid"]]

        def gpt(prompt: str, *args: Any, reply: str = reply, **kwargs: Any) -> str:
            sent.append(prompt)
            return reply

        monkeypatch.setattr(peer.mathvista_evaluator, "get_chat_response", gpt)
        theirs = peer.mathvista_process_results(row, [pred])["llm_as_judge_eval"]
        assert use == "extract" and prompt.id == "mathvista_extract@1" and prompt.render(case) == sent[-1]
        verdict = Verdict("scripted", prompt.id, reply, prompt.read(reply, case), None)
        doc = task.doc(next(r for r in task.doc_refs() if r.id == row["pid"]))
        ours = judged_score(task, doc, Response("x", text=pred), {"extract": [verdict]})
        assert ours["extract_rule"].startswith("judge+")
        if row["answer_type"] != "float":
            assert ours["extracted"] == theirs["prediction"]
            assert ours["metrics"]["llm_as_judge_eval"] == 100.0 * theirs["true_false"] == 100.0


def test_an_empty_mathvista_response_is_wrong_and_no_judge_is_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """lmms-eval's own mathvista_process_results asks GPT nothing for an empty response either; it
    takes the choice closest to '' on a choice question (difference empty_is_wrong), else is wrong."""
    peer = lmms_eval_module("tasks.mathvista.utils")
    monkeypatch.setattr(peer.mathvista_evaluator, "get_chat_response", lambda *a, **k: pytest.fail("asked GPT"))
    extract, metric = EXTRACTORS.get("mathvista_judge"), METRICS.get("mathvista_accuracy")
    for row, text, calls in judge_queries(monkeypatch, tmp_path, "mathvista_testmini", mathvista_rows(), MATHVISTA,
                                          lambda r: " \n"):  # fmt: skip
        found = extract(text, (), row)
        assert calls == [] and (found.value, found.rule) == (None, "empty")
        assert metric.score(found.value, [row["answer"]], row) == 0.0
        theirs = peer.mathvista_process_results(row, [text.strip()])["llm_as_judge_eval"]
        if row["choices"]:
            assert theirs["prediction"] == get_most_similar("", row["choices"])
        else:
            assert theirs["true_false"] is False
