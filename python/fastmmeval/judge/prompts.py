"""Versioned judge prompts: what a judge is asked and how its reply is read.

A prompt's `id` (name@version) is recorded with every judgment; changing a template's wording
means a new version, so scores from different wordings are never mixed up. Our prompts (a JSON
reply) are here; the benchmarks' own are in `benchmark_prompts`."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from PIL import Image

from fastmmeval.extract.rules import LETTERS
from fastmmeval.judge.parse import JudgmentError, parse_object, rating
from fastmmeval.registry import Registry


@dataclass(frozen=True)
class JudgeInput:
    """What a judge sees of one doc: the question (the doc's `judge_question` field when its task
    sets one, e.g. the bare question without the model's instructions; else the prompt text), the
    model's answer, the reference answers (the doc's `judge_reference` field when set, else the
    task's targets), the per-item criteria (may be empty), the options
    (multiple choice), what the judge is told about the image (the doc's `judge_context` field,
    e.g. LLaVA-Bench's captions; may be empty) and the doc's images as the model saw them (sent
    only by a prompt that shows them)."""

    question: str
    answer: str
    reference: Sequence[str] = ()
    criteria: str = ""
    options: Sequence[str] = ()
    context: str = ""
    images: Sequence[Image.Image] = ()


@dataclass(frozen=True)
class JudgePrompt:
    """A template (system + user text with {question}, {answer}, {reference}, {criteria},
    {options}, {context}) and `read`, which turns the reply into the judgment's value or raises
    JudgmentError. `level` says how agreement between judges is measured: ratings are
    interval data (Krippendorff's alpha), labels nominal (Cohen's kappa). An empty `system`
    sends the user message alone (as a benchmark's own judge prompt may be). With `images` the
    judge sees the doc's images too, first in its user message (part of the prompt: changing it
    means a new version). With `schema`, the reply is asked for in that JSON schema
    (Request.json_schema: OpenAI's `response_format`, which `fastmmeval serve` enforces for any model)."""

    name: str
    version: int
    system: str
    template: str
    read: Callable[[str, JudgeInput], Any]
    level: Literal["interval", "nominal"]
    agreement_value: Callable[[Any], float | str]
    images: bool = False
    schema: Mapping[str, Any] | None = None

    @property
    def id(self) -> str:
        """'name@version', recorded with each judgment."""
        return f"{self.name}@{self.version}"

    def render(self, case: JudgeInput) -> str:
        """The text of the user message for one doc."""
        letters = LETTERS[: len(case.options)]
        return self.template.format(
            question=case.question.replace("<image>", "").strip(),
            answer=case.answer.strip(),
            reference=" | ".join(case.reference),
            criteria=case.criteria.strip() or "(none given)",
            options="\n".join(f"{c}. {o}" for c, o in zip(letters, case.options, strict=False)),
            context=case.context,
        )


PROMPTS: Registry[JudgePrompt] = Registry("judge prompt")

_SYSTEM = "You are a careful, impartial grader. Reply with one JSON object and nothing else."


def _read_score_10(raw: str, case: JudgeInput) -> float:
    return rating(parse_object(raw), "score", 0, 10)


def _read_fraction(raw: str, case: JudgeInput) -> float:
    return rating(parse_object(raw), "score", 0, 1)


def _read_pair(raw: str, case: JudgeInput) -> dict[str, float]:
    obj = parse_object(raw)
    return {"reference": rating(obj, "reference_score", 1, 10), "answer": rating(obj, "answer_score", 1, 10)}


_LONE_LETTER = re.compile(r"^\W*([A-Z])\W*$")


def _read_option(raw: str, case: JudgeInput) -> str | None:
    """The option letter the judge matched, or None when it said Z (no option matches)."""
    try:
        value = parse_object(raw).get("option")
    except JudgmentError:
        value = raw  # MMBench's own judges answer with the bare letter
    match = _LONE_LETTER.match(value) if isinstance(value, str) else None
    if match is None:
        raise JudgmentError(f"judgment has no option letter: {raw[:80]!r}")
    letter = match.group(1)
    if letter == "Z":
        return None
    if letter not in LETTERS[: len(case.options)]:
        raise JudgmentError(f"judge chose {letter!r}, not one of the {len(case.options)} options")
    return letter


PROMPTS.add("judge_score", JudgePrompt(
    name="judge_score",
    version=1,
    system=_SYSTEM,
    template=(
        "Grade the answer to the question below against the reference answer and the grading criteria.\n"
        "Give a score from 0 (wrong or missing) to 10 (fully correct and complete, meeting every criterion).\n\n"
        "[Question]\n{question}\n\n[Reference answer]\n{reference}\n\n[Criteria]\n{criteria}\n\n"
        "[Answer to grade]\n{answer}\n\n"
        'Reply with JSON: {{"score": <integer 0-10>, "reason": "<one sentence>"}}'
    ),
    read=_read_score_10,
    level="interval",
    agreement_value=float,
))
PROMPTS.add("llava_w", JudgePrompt(
    name="llava_w",
    version=1,
    system=_SYSTEM,
    template=(
        "We would like your feedback on two answers to the user question below. Rate the helpfulness, relevance, "
        "accuracy and level of detail of each answer on a scale of 1 to 10 (higher is better). Judge the content "
        "only: the order of the answers and their length must not affect your ratings.\n\n"
        "[Question]\n{question}\n\n[Answer 1]\n{reference}\n\n[Answer 2]\n{answer}\n\n"
        'Reply with JSON: {{"reference_score": <rating of answer 1>, "answer_score": <rating of answer 2>, '
        '"reason": "<one sentence>"}}'
    ),
    read=_read_pair,
    level="interval",
    agreement_value=lambda v: v["answer"] / v["reference"],
))
PROMPTS.add("mmvet", JudgePrompt(
    name="mmvet",
    version=1,
    system=_SYSTEM,
    template=(
        "Compare the answer with the ground truth and grade its correctness from 0.0 (wrong) to 1.0 (correct). "
        "'<AND>' in the ground truth means every part is needed; '<OR>' means any one is enough. Partly correct "
        "answers get a value in between (e.g. 0.5).\n\n"
        "[Question]\n{question}\n\n[Ground truth]\n{reference}\n\n[Answer]\n{answer}\n\n"
        'Reply with JSON: {{"score": <number 0.0-1.0>}}'
    ),
    read=_read_fraction,
    level="interval",
    agreement_value=float,
))
PROMPTS.add("mmbench_option", JudgePrompt(
    name="mmbench_option",
    version=1,
    system=_SYSTEM,
    template=(
        "Match an answer to one of the options of a single-choice question: find the option whose meaning is "
        "closest to the answer. If the answer matches none of the options, or several equally, choose Z.\n\n"
        "[Question]\n{question}\n\n[Options]\n{options}\n\n[Answer]\n{answer}\n\n"
        'Reply with JSON: {{"option": "<one option letter, or Z>"}}'
    ),
    read=_read_option,
    level="nominal",
    agreement_value=lambda v: "Z" if v is None else v,
))
