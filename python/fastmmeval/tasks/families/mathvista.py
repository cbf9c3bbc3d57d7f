"""MathVista as lmms-eval 0.7.3 runs it (task mathvista_testmini_format): the format-prompt query
(`mathvista_format_prompt`), the answers normalized to the doc's answer type as MathVista's official
evaluation does (`mathvista`, `mathvista_judge`), and their accuracy (`mathvista_accuracy`).

Mirrors `normalize_extracted_answer` and `get_most_similar` in `evaluation/calculate_score.py`
of lupantech/MathVista (commit e999481e, run with `--ignore_empty_extractions`), and the rule
steps of `extract_answer` in `evaluation/extract_answer.py` (the response is a choice text; the
response is a number; with `--quick_extract`, `The answer is "X".`). Upstream hands every other
response to GPT-4 to extract the answer: `mathvista_judge` does the same (upstream's rules, then the
run's judge with MathVista's extraction prompt, then the normalization); `mathvista` needs no judge:
the option-letter and number rules of this package take its place.

Doc fields: `question_type` (multi_choice or free_form), `answer_type` (text, integer, float or
list), `choices` (multi_choice; else the task's options), `precision` (decimals, float answers).

Rules recorded: `choice_text` (the answer is a choice), `letter` / `option_text` /
`answer_is+...` (see `option_letter`), `quick_extract+...`, `paren_letter` ("(b)"),
`closest_choice` (the choice with the smallest Levenshtein distance: upstream's fallback and a
guess, so counted under its own name), `integer` / `float` (the response itself is the number),
`number+integer`, `answer_is+number+float`, ... (a number found in the text), `list`. An empty
response is unparsed (upstream without `--ignore_empty_extractions` maps it to the closest
choice to '', the shortest one).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.errors import DocError
from fastmmeval.extract.base import EXTRACTORS, UNPARSED, Extraction
from fastmmeval.extract.judge_assisted import JUDGE_ASSISTED, JUDGE_FINISH
from fastmmeval.extract.numbers import number
from fastmmeval.extract.options import option_letter
from fastmmeval.extract.rules import LETTERS, answer_part
from fastmmeval.metrics import METRICS, Metric
from fastmmeval.metrics.base import already_on_100
from fastmmeval.metrics.edit_distance import levenshtein_distances
from fastmmeval.tasks.processors import DOC_PROCESSORS, text_field
from fastmmeval.tasks.render import format_options

_QUICK = re.compile(r'The answer is "(.*)"\.')
EMPTY = "empty"  # the rule of an empty response: wrong, and no judge is asked
_LIST = re.compile(r"\[[^\[\]]*\]")


def get_most_similar(prediction: str, choices: Sequence[str]) -> str:
    """The choice closest to `prediction` in edit distance (the first of equals), as upstream."""
    distances = levenshtein_distances([prediction] * len(choices), choices).tolist()
    return choices[distances.index(min(distances))]


def normalize_extracted_answer(
    extraction: str, choices: Sequence[str], question_type: str, answer_type: str, precision: float | None
) -> Extraction:
    """An extracted answer in the form MathVista compares: for multi_choice the choice text (by
    '(X)' or 'X' letter, else the closest choice); integers as `int(float(x))`; floats rounded
    to `precision` decimals; lists as they are. Unreadable numbers and empty answers are unparsed."""
    extraction = extraction.strip()
    if not extraction:
        return Extraction(None, UNPARSED)
    if question_type == "multi_choice":
        rule = "letter"
        letter = re.findall(r"\(([a-zA-Z])\)", extraction)
        if letter:
            extraction, rule = letter[0].upper(), "paren_letter"
        letters = LETTERS[: len(choices)]
        if extraction in letters:
            return Extraction(choices[letters.index(extraction)], rule)
        closest = get_most_similar(extraction, choices)
        return Extraction(closest, "choice_text" if closest == extraction else "closest_choice")
    try:
        if answer_type == "integer":
            return Extraction(str(int(float(extraction))), "integer")
        if answer_type == "float":
            if precision is None:
                raise DocError("mathvista: a float answer needs the doc field 'precision'")
            return Extraction(str(round(float(extraction), int(precision))), "float")
    except (ValueError, OverflowError):
        return Extraction(None, UNPARSED)
    if answer_type == "list":
        return Extraction(extraction, "list")
    raise DocError(f"mathvista: answer_type {answer_type!r} of a {question_type!r} question has no normalization")


def _multi_choice(response: str, choices: list[str]) -> Extraction:
    if response in choices:
        return Extraction(response, "choice_text")
    quick = _QUICK.search(response)
    if quick:
        found = normalize_extracted_answer(quick.group(1), choices, "multi_choice", "text", None)
        return Extraction(found.value, "quick_extract+" + found.rule)
    found = option_letter(response, choices)
    if found.value is not None:
        return Extraction(choices[LETTERS.index(found.value)], found.rule)
    if found.rule != UNPARSED:  # a refusal
        return found
    body, prefix = answer_part(response)
    normalized = normalize_extracted_answer(body, choices, "multi_choice", "text", None)
    return Extraction(normalized.value, prefix + normalized.rule)


@EXTRACTORS.register("mathvista")
def mathvista(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """The answer in the form MathVista's official scorer compares (see the module docstring)."""
    fields = fields or {}
    question_type = text_field(fields, "question_type", "mathvista")
    answer_type = text_field(fields, "answer_type", "mathvista")
    response = text.strip()
    if not response:
        return Extraction(None, UNPARSED)
    if question_type == "multi_choice":
        choices = [str(c) for c in (fields.get("choices") or options)]
        if not choices:
            raise DocError("mathvista: a multi_choice question needs the doc field 'choices'")
        return _multi_choice(response, choices)
    precision = fields.get("precision")
    if answer_type in ("integer", "float"):
        direct = normalize_extracted_answer(response, [], question_type, answer_type, precision)
        if direct.value is not None:
            return direct
        found = number(response)
        if found.value is None:
            return found
        normalized = normalize_extracted_answer(found.value.rstrip("%"), [], question_type, answer_type, precision)
        if normalized.value is None:
            return normalized
        return Extraction(normalized.value, f"{found.rule}+{normalized.rule}")
    if answer_type == "list":
        m = _LIST.search(response)
        return Extraction(m.group(0), "list") if m else Extraction(None, UNPARSED)
    return normalize_extracted_answer(response, [], question_type, answer_type, precision)


@EXTRACTORS.register("mathvista_judge")
def mathvista_rules_first(
    text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None
) -> Extraction:
    """Upstream's rules before its GPT extraction, normalized: the response is a choice's text, or
    (integer / float answers) a number Python reads as it is; every other response is unparsed here,
    for the judge (`mathvista_extract`), whose reply `mathvista_finish` normalizes. An empty response
    is wrong (rule `empty`) without a judge call, as upstream asks none for it (and then takes the
    choice closest to '', a guess, which is not taken here)."""
    fields = fields or {}
    question_type = text_field(fields, "question_type", "mathvista")
    answer_type = text_field(fields, "answer_type", "mathvista")
    response = text.strip()
    if not response:
        return Extraction(None, EMPTY)
    choices = [str(c) for c in (fields.get("choices") or options)]
    if question_type == "multi_choice" and response in choices:
        return Extraction(response, "choice_text")
    read = {"integer": int, "float": float}.get(answer_type)
    if read is not None and response:
        try:
            read(response)
        except ValueError:
            return Extraction(None, UNPARSED)
        return normalize_extracted_answer(response, choices, question_type, answer_type, fields.get("precision"))
    return Extraction(None, UNPARSED)


def mathvista_finish(extraction: str, options: Sequence[str], fields: Mapping[str, Any]) -> Extraction:
    """A judge's extracted answer, normalized as MathVista's scorer does (`normalize_extracted_answer`)."""
    choices = [str(c) for c in (fields.get("choices") or options)]
    return normalize_extracted_answer(
        extraction,
        choices,
        text_field(fields, "question_type", "mathvista"),
        text_field(fields, "answer_type", "mathvista"),
        fields.get("precision"),
    )


JUDGE_ASSISTED["mathvista_judge"] = "mathvista_extract"
JUDGE_FINISH["mathvista_judge"] = mathvista_finish


_FORMAT_HINTS = {
    "integer": "Answer the question using a single integer number.",
    ("float", 1): "Answer the question using a single floating-point number with one decimal place.",
    ("float", 2): "Answer the question using a single floating-point number with two decimal places.",
    "list": "Answer the question using a Python list.",
}


@DOC_PROCESSORS.register("mathvista_format_prompt")
def mathvista_format_prompt(row: dict[str, Any]) -> dict[str, str]:
    """`format_query`: lmms-eval's zero-shot "format-prompt" query (task mathvista_testmini_format):
    the question with its unit, the choices lettered "A. ...", and the answer-format hint; and
    `judge_question`: the dataset's own `query`, which the answer-extraction judge is shown."""
    question_type, answer_type = row["question_type"], row["answer_type"]
    if question_type == "multi_choice":
        hint = "Answer with the option's letter from the given choices directly."
    else:
        key = ("float", row.get("precision")) if answer_type == "float" else answer_type
        hint = _FORMAT_HINTS.get(key)
        if hint is None:
            raise DocError(
                f"mathvista: no format hint for answer_type {answer_type!r}, precision {row.get('precision')!r}"
            )
    question = str(row["question"]) + (f" (Unit: {row['unit']})" if row.get("unit") else "")
    choices = format_options([str(c) for c in row["choices"]]) if row.get("choices") else ""
    format_query = "\n".join(part for part in (question, choices, hint) if part).strip()
    return {"format_query": format_query, "judge_question": str(row.get("query") or "")}


def mathvista_correct(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> float:
    """100 when the normalized answer equals the reference after stripping both (MathVista's
    `safe_equal`), else 0; unparsed is wrong."""
    return 100.0 * (prediction is not None and any(prediction.strip() == t.strip() for t in targets))


METRICS.add("mathvista_accuracy", Metric("mathvista_accuracy", mathvista_correct, to_100=already_on_100))
