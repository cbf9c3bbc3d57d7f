"""MathVerse testmini (mathverse_testmini and its six problem-version sub-tasks) run by name on
fixtures in the hub schema, with lmms-eval 0.7.3's prompts, result keys and grades: lmms-eval's own
`mathverse_process_results` and aggregation run on the same answers, its judge call answered by
tests/judge_fixtures.py's scripted judge, as our runs are graded through `--judge_config`.

Hub schema (CaraJ/MathVerse-lmmseval; its card was not available offline): the columns lmms-eval's
utils read (sample_index, problem_index, problem_version, question, image, answer, question_type,
metadata, query_wo, query_cot, question_for_eval), all strings, `metadata` the struct split /
source / subject / subfield that MathVerse's `eval_results` reads subfield from, and `image` an
image, as in AI4Math/MathVerse, whose testmini it copies and adds question_for_eval to. The
text-only config is taken to hold an empty string in `image` (AI4Math/MathVerse's
testmini_text_only does; lmms-eval tests `str(doc["image"]).strip() == ""`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import datasets
import pytest
from judge_fixtures import JudgeArgs, scripted_reply
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
from fastmmeval.judge.judge import Verdict
from fastmmeval.judge.parse import JudgmentError
from fastmmeval.judge.pipeline import judge_calls, judged_score
from fastmmeval.parity import EXPLAINERS, Mismatch, PeerTask
from fastmmeval.parity.harness import peer_prompt_parts, prompt_parts
from fastmmeval.protocol import Doc, Response
from fastmmeval.tasks.processors import DOC_PROCESSORS
from fastmmeval.tasks.sources import DATA_DIR_ENV
from fastmmeval.tasks.task import Task

S = datasets.Value("string")
COLUMNS = {
    "sample_index": S, "problem_index": S, "problem_version": S, "question": S, "image": datasets.Image(),
    "answer": S, "question_type": S, "metadata": {"split": S, "source": S, "subject": S, "subfield": S},
    "query_wo": S, "query_cot": S, "question_for_eval": S,
}  # fmt: skip
MATHVERSE_TESTMINI = datasets.Features(COLUMNS)
MATHVERSE_TESTMINI_TEXT_ONLY = datasets.Features({**COLUMNS, "image": S})
MATHVERSE_TESTMINI_TEXT_LITE = MATHVERSE_TESTMINI_TEXT_DOMINANT = MATHVERSE_TESTMINI
MATHVERSE_TESTMINI_VISION_INTENSIVE = MATHVERSE_TESTMINI_VISION_DOMINANT = MATHVERSE_TESTMINI
MATHVERSE_TESTMINI_VISION_ONLY = MATHVERSE_TESTMINI

VERSIONS = ("Text Dominant", "Text Lite", "Vision Intensive", "Vision Dominant", "Vision Only")
# (question_type, answer, a right response, a wrong response, the question in each of VERSIONS)
PROBLEMS = [
    ("multi-choice", "B", "The answer is B.", "A", (
        "As shown in the figure, in triangle ABC, angle C = 90°, AB = 10 and BC = 6. What is the length of AC?\n"
        "Choices:\nA:6\nB:8\nC:10\nD:12",
        "As shown in the figure, AB = 10 and BC = 6. What is the length of AC?\nChoices:\nA:6\nB:8\nC:10\nD:12",
        "As shown in the figure, what is the length of AC?\nChoices:\nA:6\nB:8\nC:10\nD:12",
        "As shown in the figure, what is the length of AC?\nChoices:\nA:6\nB:8\nC:10\nD:12",
        "",
    )),
    ("free-form", "3", "3", "The distance is 5", (
        "As shown in the figure, the radius of circle O is 5 and the chord AB has length 8. Find the distance "
        "from O to AB.",
        "As shown in the figure, the chord AB has length 8. Find the distance from O to AB.",
        "Find the distance from O to AB.",
        "Find the distance from O to AB.",
        "",
    )),
]  # fmt: skip
_ASK = {"multi-choice": "provide the correct option letter, e.g., A, B, C, D",
        "free-form": "provide the final value, e.g., 1, 2.5, 300"}  # fmt: skip


def _row(sample: int, problem: int, version: str) -> dict[str, Any]:
    question_type, answer, _, _, questions = PROBLEMS[problem]
    ask = _ASK[question_type]
    full = questions[0]
    question = full if version == "Text Only" else questions[VERSIONS.index(version)]
    if version == "Vision Only":  # the whole question is in the image; query_wo ends in "Question: "
        query_wo = f"According to the question shown in the image, please directly answer the question and {ask}.\n"
        query_wo += "Question: "
    else:
        query_wo = f"Please directly answer the question and {ask}.\nQuestion: {question}"
    return {
        "sample_index": str(sample), "problem_index": str(problem + 1), "problem_version": version,
        "question": question, "image": "" if version == "Text Only" else photo(sample, 48), "answer": answer,
        "question_type": question_type,
        "metadata": {"split": "testmini", "source": "GeoQA", "subject": "Plane Geometry", "subfield": "Length"},
        "query_wo": query_wo, "query_cot": query_wo.replace("directly answer", "first reason, and then answer"),
        "question_for_eval": full,
    }  # fmt: skip


def _version_rows(version: str) -> list[dict[str, Any]]:
    offset = 3940 if version == "Text Only" else VERSIONS.index(version)
    return [_row(offset + 5 * p + 1, p, version) for p in range(len(PROBLEMS))]


def mathverse_testmini_rows() -> list[dict[str, Any]]:
    return [_row(5 * p + v + 1, p, version) for p in range(len(PROBLEMS)) for v, version in enumerate(VERSIONS)]


def mathverse_testmini_text_dominant_rows() -> list[dict[str, Any]]:
    return _version_rows("Text Dominant")


def mathverse_testmini_text_lite_rows() -> list[dict[str, Any]]:
    return _version_rows("Text Lite")


def mathverse_testmini_text_only_rows() -> list[dict[str, Any]]:
    return _version_rows("Text Only")


def mathverse_testmini_vision_intensive_rows() -> list[dict[str, Any]]:
    return _version_rows("Vision Intensive")


def mathverse_testmini_vision_dominant_rows() -> list[dict[str, Any]]:
    return _version_rows("Vision Dominant")


def mathverse_testmini_vision_only_rows() -> list[dict[str, Any]]:
    return _version_rows("Vision Only")


TASKS = [
    "mathverse_testmini", "mathverse_testmini_text_dominant", "mathverse_testmini_text_lite",
    "mathverse_testmini_text_only", "mathverse_testmini_vision_intensive", "mathverse_testmini_vision_dominant",
    "mathverse_testmini_vision_only",
]  # fmt: skip


def fixture(task: str) -> tuple[datasets.Features, list[dict[str, Any]]]:
    """The task's hub features and fixture rows."""
    return globals()[task.upper()], globals()[f"{task}_rows"]()


def right(row: dict[str, Any]) -> str:
    """A response the scripted judge grades correct for the row's problem."""
    return PROBLEMS[int(row["problem_index"]) - 1][2]


def wrong(row: dict[str, Any]) -> str:
    """A response the scripted judge grades wrong for the row's problem."""
    return PROBLEMS[int(row["problem_index"]) - 1][3]


@pytest.fixture
def peer(monkeypatch: pytest.MonkeyPatch) -> Any:
    """lmms-eval's mathverse utils (its judge client is built on import, never called)."""
    monkeypatch.setenv("OPENAI_API_KEY", "unused-by-these-tests")
    return lmms_eval_module("tasks.mathverse.utils")


def judged_by(monkeypatch: pytest.MonkeyPatch, peer: Any, reply: Callable[[str], str | None]) -> list[str]:
    """Answer lmms-eval's judge calls with `reply(prompt)` (None makes the call fail, as the real
    server raises once its retries are spent); returns the prompts it sends, as they are sent."""
    protocol = lmms_eval_module("llm_judge.protocol")
    sent: list[str] = []

    def evaluate(request: Any) -> Any:
        sent.append(request.messages[0]["content"])
        assert [m["role"] for m in request.messages] == ["user"]
        content = reply(sent[-1])
        if content is None:
            raise RuntimeError("scripted judge failure")
        return protocol.Response(content=content, model_used="scripted")

    monkeypatch.setattr(peer.mathverse_evaluator.server, "evaluate", evaluate)
    return sent


def lmms_eval_score(peer: Any, row: dict[str, Any], response: str) -> int:
    """lmms-eval's gpt_eval_score for one doc answered with `response`."""
    return peer.mathverse_process_results(row, [response])["gpt_eval_score"]


def docs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, task_name: str, rows: list[dict[str, Any]]
) -> Iterator[tuple[Task, Doc, dict[str, Any]]]:
    """(task, doc, hub row) for each row, the rows saved where the task reads them."""
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    save_split(tmp_path, task_config(task_name), rows, fixture(task_name)[0])
    task = Task(task_config(task_name))
    for ref, row in zip(task.doc_refs(), rows, strict=True):
        yield task, task.doc(ref), row


def our_sample(task: Task, doc: Doc, response: str, reply: str) -> dict[str, Any]:
    """Our scored sample of one doc whose judge replied `reply`."""
    request = task.request(doc, seed=0)
    [(use, prompt, case)] = judge_calls(task, doc, request, Response(request.id, text=response))
    verdict = Verdict("scripted", prompt.id, reply)
    try:
        verdict.value = prompt.read(reply, case)
    except JudgmentError as e:
        verdict.error = str(e)
    scored = judged_score(task, doc, Response(request.id, text=response), {use: [verdict]})
    return {"doc_id": doc.id, "response": response, **scored}


def our_score(task: Task, doc: Doc, response: str, reply: str) -> float | None:
    """Our gpt_eval_score for one doc whose judge replied `reply` (None: a failed judgment)."""
    return our_sample(task, doc, response, reply)["metrics"]["gpt_eval_score"]


def explained_by(
    ours: Any, theirs: Any, samples: list[dict[str, Any]], task: Task, theirs_with: Callable[..., Any] | None = None
) -> list[str]:
    """The listed differences of the task whose parity explainers (tests/test_parity.py) account
    for our gpt_eval_score `ours` against lmms-eval's `theirs` on these samples."""
    kind = "score" if len(samples) == 1 else "aggregate"
    m = Mismatch(kind, "gpt_eval_score,none", tuple(s["doc_id"] for s in samples),
                 tuple(s["response"] for s in samples), ours, theirs, theirs_with, tuple(samples))  # fmt: skip
    listed = task.config.lmms_eval.differences if task.config.lmms_eval else {}
    return [d for d in listed if EXPLAINERS.get(d)(m, task)]


@pytest.fixture
def judge(tmp_path: Path) -> Callable[..., list[str]]:
    """The CLI flags that grade a run with the scripted judge (given JudgeArgs fields)."""

    def flags(**args: str) -> list[str]:
        config = tmp_path / "judges.json"
        config.write_text(json.dumps({"judges": [{"name": "scripted", "model": "scripted_judge", "args": args}]}))
        return ["--judge_config", str(config)]

    return flags


@pytest.mark.parametrize("task", TASKS)
def test_a_mathverse_task_reads_lmms_eval_data_and_generation_settings(task: str) -> None:
    config, reference = task_config(task), lmms_eval_yaml("mathverse", f"{task}.yaml")
    assert (config.dataset.path, config.dataset.name, config.split) == (
        reference["dataset_path"], reference["dataset_name"], reference["test_split"],
    )  # fmt: skip
    kwargs = reference["generation_kwargs"]
    assert config.generation.max_new_tokens == kwargs["max_new_tokens"]
    assert config.generation.temperature == kwargs.get("temperature", 0) == 0
    assert config.generation.stop == tuple(kwargs["until"])
    assert config.lmms_eval is not None and config.lmms_eval.task == reference["task"] == task
    assert config.docs == (3940 if task == "mathverse_testmini" else 788)
    assert "stop_string" in config.lmms_eval.differences and "failed_judgments" in config.lmms_eval.differences


def test_the_groups_are_lmms_evals_and_only_the_whole_testmini_is_in_judge() -> None:
    from fastmmeval.tasks.catalog import Catalog

    groups, peer_group = Catalog().groups, lmms_eval_yaml("mathverse", "mathverse.yaml")
    assert set(groups["mathverse"]) == set(peer_group["task"]) == set(TASKS)
    for name in ("mathverse_testmini_text", "mathverse_testmini_vision"):
        assert set(groups[name]) == set(lmms_eval_yaml("mathverse", f"{name}.yaml")["task"])
    assert [t for t in groups["judge"] if t.startswith("mathverse")] == ["mathverse_testmini"]


@pytest.mark.parametrize("task", TASKS)
def test_a_mathverse_task_runs_by_name_with_lmms_eval_prompt_keys_and_grades(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, peer: Any, judge: Callable[..., list[str]], task: str
) -> None:
    features, rows = fixture(task)
    data = tmp_path / "data"
    save_split(data, task_config(task), rows, features)
    answers = {r["sample_index"]: (right(r) if k % 2 == 0 else wrong(r)) for k, r in enumerate(rows)}
    results, samples = run_task(tmp_path, data, task, answers, list(answers), *judge())

    judged_by(monkeypatch, peer, scripted_reply)
    theirs = [lmms_eval_score(peer, r, answers[r["sample_index"]]) for r in rows]
    assert [s["metrics"]["gpt_eval_score"] for s in samples] == theirs == [1, 0] * (len(rows) // 2)
    reference = lmms_eval_yaml("mathverse", f"{task}.yaml")
    keys = {f"{m['metric']},none" for m in reference["metric_list"] if m["metric"] != "submission"}
    assert keys == {"gpt_eval_score,none"} and keys <= set(results)
    assert results["gpt_eval_score,none"] == pytest.approx(peer.mathverse_aggregate_results_eval(theirs, None))
    assert results["n_judged"] == {"gpt_eval_score": len(rows)} and results["failed_judgments"] == {"gpt_eval_score": 0}

    assert_renders(samples)
    for sample, row in zip(samples, rows, strict=True):
        assert prompt_text(sample).replace("<image>", "") == lmms_eval_prompt("mathverse", f"{task}.yaml", row)
        assert prompt_text(sample).count("<image>") == (task != "mathverse_testmini_text_only")


@pytest.mark.parametrize("task_name", TASKS)
def test_the_prompt_is_the_one_lmms_eval_chat_models_build_image_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, peer: Any, task_name: str
) -> None:
    """Text and image (by content hash) in lmms-eval's order, as the parity harness compares them;
    the text-only version has no image there either."""
    lmms_task = PeerTask.load(task_name)
    for task, doc, row in docs(monkeypatch, tmp_path, task_name, fixture(task_name)[1]):
        ours = prompt_parts(task.request(doc, seed=0))
        assert ours == peer_prompt_parts(lmms_task, row)
        assert [kind for kind, _ in ours] == (["text"] if task_name.endswith("text_only") else ["image", "text"])


def test_the_judge_is_asked_and_read_exactly_as_lmms_eval_asks_and_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, peer: Any
) -> None:
    """lmms-eval's own mathverse_process_results, its judge call answered with fixed replies, sends
    our judge's query (question_for_eval, the answer, the stripped response) and grades as we do."""
    for task, doc, row in docs(monkeypatch, tmp_path, "mathverse_testmini", mathverse_testmini_rows()):
        response = f"  Let me think.\nThe answer is {row['answer']}.\n"
        request = task.request(doc, seed=0)
        [(use, prompt, case)] = judge_calls(task, doc, request, Response(request.id, text=response))
        assert use == "gpt_eval_score" and prompt.id == "lmms_eval_binary@1" and prompt.system == ""
        for reply in ("1", "0", "**1**", "Score: 0", "1\n\nThe prediction matches."):
            sent = judged_by(monkeypatch, peer, lambda _, reply=reply: reply)
            theirs = lmms_eval_score(peer, row, response)
            assert prompt.render(case) == sent[-1]
            assert our_score(task, doc, response, reply) == theirs


def test_a_failed_judge_call_is_counted_where_lmms_eval_scores_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, peer: Any, judge: Callable[..., list[str]]
) -> None:
    """Difference failed_judgments: the doc whose judge call fails is left out and counted."""
    rows = mathverse_testmini_vision_only_rows()
    data = tmp_path / "data"
    save_split(data, task_config("mathverse_testmini_vision_only"), rows, MATHVERSE_TESTMINI_VISION_ONLY)
    answers = {rows[0]["sample_index"]: right(rows[0]), rows[1]["sample_index"]: f"{right(rows[1])}  # FAILME"}
    results, samples = run_task(tmp_path, data, "mathverse_testmini_vision_only", answers, list(answers),
                                *judge(fail_on="FAILME"))  # fmt: skip
    assert results["failed_judgments"] == {"gpt_eval_score": 1} and results["n_judged"] == {"gpt_eval_score": 1}
    assert [s["metrics"]["gpt_eval_score"] for s in samples] == [1.0, None]
    assert results["gpt_eval_score,none"] == 1.0

    judged_by(monkeypatch, peer, lambda prompt: scripted_reply(prompt, JudgeArgs(fail_on="FAILME")))
    theirs = [lmms_eval_score(peer, r, answers[r["sample_index"]]) for r in rows]
    assert theirs == [1, 0]
    aggregate = peer.mathverse_aggregate_results_eval(theirs, None)
    assert aggregate == 0.5
    task = Task(task_config("mathverse_testmini_vision_only"))
    assert explained_by(None, 0, samples[1:], task) == ["failed_judgments"]
    assert explained_by(1.0, aggregate, samples, task) == ["failed_judgments"]


@pytest.mark.parametrize(("reply", "lmms_eval_reads", "we_read"), [
    ("10", 1, None), ("0.5 (1 step is wrong)", 1, None), ("I cannot tell.", 0, None),
    ("0, the answer is not 1/2", 1, 0),
])  # fmt: skip
def test_a_reply_lmms_eval_reads_by_the_character_1_is_read_by_its_leading_grade_or_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, peer: Any, reply: str, lmms_eval_reads: int, we_read: int | None
) -> None:
    """Difference judge_reply_reading: lmms-eval grades 1 any reply holding the character 1; here a
    reply that does not start with 1 or 0 is a failed judgment (None)."""
    task, doc, row = next(docs(monkeypatch, tmp_path, "mathverse_testmini", mathverse_testmini_rows()))
    judged_by(monkeypatch, peer, lambda _: reply)
    assert lmms_eval_score(peer, row, right(row)) == lmms_eval_reads
    sample = our_sample(task, doc, right(row), reply)
    assert sample["metrics"]["gpt_eval_score"] == we_read
    assert explained_by(we_read, lmms_eval_reads, [sample], task) == ["judge_reply_reading"]


def test_the_judge_sees_question_for_eval_stripped_where_lmms_eval_sends_it_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, peer: Any
) -> None:
    """A note of the card: the judge's prompt differs only by the whitespace around the question."""
    rows = mathverse_testmini_text_lite_rows()
    rows[0]["question_for_eval"] = f"\n{rows[0]['question_for_eval']}  "
    task, doc, row = next(docs(monkeypatch, tmp_path, "mathverse_testmini_text_lite", rows))
    request = task.request(doc, seed=0)
    [(_, prompt, case)] = judge_calls(task, doc, request, Response(request.id, text=right(row)))
    sent = judged_by(monkeypatch, peer, scripted_reply)
    lmms_eval_score(peer, row, right(row))
    ours = prompt.render(case)
    assert ours != sent[-1]
    assert ours == sent[-1].replace(row["question_for_eval"], row["question_for_eval"].strip())


def test_a_response_cut_at_a_stop_string_can_lose_the_answer_lmms_eval_chat_models_keep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, peer: Any
) -> None:
    """Difference stop_string: our backends end the response at "Q:"; lmms-eval's chat models do not."""
    task, doc, row = next(docs(monkeypatch, tmp_path, "mathverse_testmini", mathverse_testmini_rows()))
    response = "Restating it. Q: what is AC? By Pythagoras AC = 8, so the answer is B."
    cut = cut_at_stop(response, task.config.generation.stop)
    assert cut == "Restating it. "
    sent = judged_by(monkeypatch, peer, scripted_reply)
    assert lmms_eval_score(peer, row, response) == 1
    request = task.request(doc, seed=0)
    [(_, prompt, case)] = judge_calls(task, doc, request, Response(request.id, text=cut))
    sample = our_sample(task, doc, cut, scripted_reply(prompt.render(case)))
    assert sample["metrics"]["gpt_eval_score"] == 0.0
    assert lmms_eval_score(peer, row, cut) == 0 and prompt.render(case) == sent[-1]
    sample["response"] = response  # what the model wrote; our backend returned `cut`

    def theirs_with(transform: Callable[[str], str]) -> int:
        return lmms_eval_score(peer, row, transform(response))

    assert explained_by(0.0, 1, [sample], task, theirs_with) == ["stop_string"]


def test_a_row_without_the_fields_the_prompt_and_judge_read_fails_naming_the_field() -> None:
    row = mathverse_testmini_rows()[0]
    processor = DOC_PROCESSORS.get("mathverse")
    assert processor(row) == {"mathverse_query": row["query_wo"], "judge_question": row["question_for_eval"]}
    for field in ("query_wo", "question_for_eval"):
        with pytest.raises(DocError, match=f"mathverse: doc field '{field}' is missing or not a string"):
            processor({k: v for k, v in row.items() if k != field})
