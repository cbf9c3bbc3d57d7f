"""MMMU and CMMMU as lmms-eval 0.7.3 runs them: the doc processors that build their prompts
(images, `<image N>` tokens, options parsed from a string list), and the answer readings and
accuracy of `_task_utils/mmmu_mcq_utils.py` and `cmmmu/utils.py`, ported rule for rule except that
where lmms-eval falls back to a random option or a coin flip the answer is unparsed (None, wrong).
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.errors import DocError
from fastmmeval.extract import EXTRACTORS, UNPARSED, Extraction
from fastmmeval.extract.rules import LETTERS
from fastmmeval.metrics import METRICS, Metric
from fastmmeval.tasks.families.mcq import image_fields, strip_chars, text_field
from fastmmeval.tasks.processors import DOC_PROCESSORS
from fastmmeval.tasks.render import format_options

# --- MMMU ------------------------------------------------------------------------------------

MMMU_MC_PROMPT = "Answer with the option's letter from the given choices directly."
MMMU_OPEN_PROMPT = "Answer the question using a single word or phrase."
MMMU_IMAGES = 7  # image_1 ... image_7
_TRIVIAL = {":", ",", ".", "!", "?", ";", "'"}


def _mmmu_options(row: Mapping[str, Any]) -> list[str]:
    """MMMU's `options`, a Python list literal stored as a string."""
    raw = text_field(row, "options")
    try:
        options = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        raise DocError(f"field 'options' is not a Python list literal: {raw[:80]!r}") from None
    if not isinstance(options, list):
        raise DocError(f"field 'options' must hold a list, got {raw[:80]!r}")
    return [str(o) for o in options]


@DOC_PROCESSORS.register("mmmu")
def mmmu(row: dict[str, Any]) -> dict[str, Any]:
    """lmms-eval's MMMU prompt parts: `option_texts` (the parsed options), `option_lines` ("\\n"
    and the lettered options for a multiple-choice question, empty for an open one),
    `instruction` (its default multiple_choice_prompt or open_ended_prompt), and `images`: the
    row's image_1 ... image_7 in order (None where it has fewer), which the prompt's `<image N>`
    tags pick; and `subject`, the subject its `id` names (`mmmu_subject`)."""
    text_field(row, "question")  # the prompt shows it: it must be text
    options = _mmmu_options(row)
    choice = text_field(row, "question_type") == "multiple-choice"
    return {
        "option_texts": options,
        "option_lines": "\n" + format_options(options) if choice else "",
        "instruction": MMMU_MC_PROMPT if choice else MMMU_OPEN_PROMPT,
        "images": [row.get(f"image_{n}") for n in range(1, MMMU_IMAGES + 1)],
        "subject": mmmu_subject(row.get("id")),
    }


def mmmu_subject(doc_id: Any) -> str | None:
    """The subject of an MMMU id `<split>_<Subject>_<number>` ("validation_Art_Theory_1": "Art_Theory"), as
    lmms-eval's `extract_subset_name` reads it; None for an id of another shape (lmms-eval raises)."""
    match = re.fullmatch(r"[^_]+_(.+?)_\d+", doc_id) if isinstance(doc_id, str) else None
    return match.group(1) if match else None


def parse_mmmu_choice(response: str, options: Sequence[str]) -> str | None:
    """MMMU's reading of a multiple-choice answer (lmms-eval's parse_mmmu_multi_choice_response):
    "(B)", else "B " or "B." (the last one when several letters are found), else, in answers of
    more than five words, the option text found last; None where lmms-eval picks a random letter."""
    letters = LETTERS[: len(options)]
    index2ans = dict(zip(letters, options, strict=True))
    response = " " + strip_chars(response, [",", ".", "!", "?", ";", ":", "'"]) + " "
    by_text = False
    candidates = [c for c in letters if f"({c})" in response]
    bracketed = bool(candidates)
    candidates = candidates or [c for c in letters if f"{c} " in response]
    candidates = candidates or [c for c in letters if f"{c}." in response]
    if not candidates and len(response.split()) > 5:
        candidates = [c for c, text in index2ans.items() if text.lower() in response.lower()]
        by_text = bool(candidates)
    if not candidates:
        return None
    if len(candidates) == 1:
        return candidates[0]
    if by_text:
        positions = [response.lower().rfind(index2ans[c].lower()) for c in candidates]
    else:
        positions = [response.rfind(f"({c})" if bracketed else f" {c} ") for c in candidates]
    return candidates[positions.index(max(positions))]


def _key_responses(
    response: str, parts: Sequence[str], indicators: Sequence[str], last_also: Sequence[str]
) -> list[str]:
    """The shortest tail after an indicator word in each part (the last part also splits on
    `last_also`), skipping trivial ones; [response] when no part has one (MMMU's and CMMMU's
    get_key_subresponses)."""
    keys = []
    for index, part in enumerate(parts):
        words = [*indicators, *last_also] if index == len(parts) - 1 else indicators
        shortest: str | None = None
        for word in words:
            if word in part:
                tail = part.split(word)[-1].strip()
                if not shortest or len(tail) < len(shortest):
                    shortest = tail
        if shortest and shortest.strip() not in _TRIVIAL:
            keys.append(shortest)
    return keys or [response]


def _is_number(text: str) -> bool:
    try:
        float(text.replace(",", ""))
        return True
    except ValueError:
        return False


def _mmmu_numbers(text: str) -> list[str]:
    """Every number written in `text`: with thousands commas, in scientific notation, plain."""
    with_commas = re.findall(r"-?\b\d{1,3}(?:,\d{3})+\b", text)
    scientific = re.findall(r"-?\d+(?:\.\d+)?[eE][+-]?\d+", text)
    simple = re.findall(r"-?(?:\d+\.\d+|\.\d+|\d+\b)(?![eE][+-]?\d+)(?![,\d])", text)
    return with_commas + scientific + simple


def _mmmu_normalize(text: str) -> list[str | float]:
    """MMMU's normalize_str: a number as a float rounded to 2 decimals, else the lower-cased text
    (a single character padded with a space on either side, to avoid trivial matches)."""
    text = text.strip()
    if _is_number(text):
        return [round(float(text.replace(",", "")), 2)]
    text = text.lower()
    return [" " + text, text + " "] if len(text) == 1 else [text]


def mmmu_open_readings(response: str) -> list[str | float]:
    """MMMU's readings of an open answer in the order read: the key parts of the lower-cased answer,
    then every number in them, normalized, each once."""
    response = response.strip().strip(".").lower()
    parts = re.split(r"\.\s(?=[A-Z])|\n", response)
    keys = _key_responses(response, parts, ["could be ", "so ", "is ", "thus ", "therefore ", "final ",
                                            "answer ", "result "], ["="])  # fmt: skip
    found = [*keys, *(n for key in keys for n in _mmmu_numbers(key))]
    return list(dict.fromkeys(v for text in found for v in _mmmu_normalize(text)))


def parse_mmmu_open(response: str) -> list[str | float]:
    """MMMU's reading of an open answer (parse_open_response): `mmmu_open_readings` in the order of a
    set, as lmms-eval lists them (the same order as its list in the same process)."""
    return list(set(mmmu_open_readings(response)))


def mmmu_open_correct(answer: str, candidates: Sequence[str | float]) -> bool:
    """MMMU's eval_open: a string candidate contains the normalized answer, or a number candidate
    equals it."""
    return _matches(_mmmu_normalize(answer), candidates)


def _matches(references: Sequence[str | float | None], candidates: Sequence[str | float | None]) -> bool:
    """A string candidate contains a string reference, or a number candidate equals a reference."""
    for candidate in candidates:
        if isinstance(candidate, str):
            if any(isinstance(r, str) and r in candidate for r in references):
                return True
        elif candidate in references:
            return True
    return False


@EXTRACTORS.register("mmmu")
def mmmu_answer(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """A multiple-choice answer's letter by `parse_mmmu_choice`; an open answer as it is (the
    `mmmu_acc` metric reads it, as its reading needs the reference)."""
    fields = fields or {}
    if fields.get("question_type") != "multiple-choice":
        return Extraction(text, "open")
    letter = parse_mmmu_choice(text, fields.get("option_texts") or [])
    return Extraction(letter, "mmmu_choice") if letter else Extraction(None, UNPARSED)


def mmmu_acc(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> float:
    """1.0 when the answer is right by MMMU's rules: the letter equals the answer for a
    multiple-choice question; `mmmu_open_correct` on `parse_mmmu_open` for an open one."""
    if prediction is None:
        return 0.0
    if fields.get("question_type") == "multiple-choice":
        return float(prediction == targets[0])
    return float(mmmu_open_correct(targets[0], parse_mmmu_open(prediction)))


# --- CMMMU -----------------------------------------------------------------------------------

CMMMU_INSTRUCTIONS = {
    "选择": (
        "请回答以下多项选择题，并选出正确选项。这些题目可能包括单选和多选题型。"
        "如果所提供的信息不足以确定一个明确的答案，那么请根据可用的数据和你的判断来选择最可能正确的选项。"
    ),
    "判断": (
        "请回答以下判断题，并根据题目描述和所给的信息来判断问题中陈述的对错。"
        "如果信息不完整或不足以作出绝对判断，请运用你的逻辑推理和现有信息来做出最可能的判断。"
    ),
    "填空": (
        "请回答以下填空题，并根据题目的要求和所提供的信息来给出最恰当的答案。"
        "如果信息不足以确切回答，那么请依据现有的数据和你的推理能力来填写最合理的答案。"
    ),
}
_CMMMU_IMAGE_TOKEN = re.compile(r"<图片 \d+>")
_CMMMU_POSITIVE = ("正确", "对", "准确", "肯定", "对的")
_CMMMU_NEGATIVE = ("不对", "错误", "不正确", "不准确", "不合适", "否定", "错的", "错")
_CMMMU_TRUE_FALSE_WORDS = ("是", "为", "所以", "判断", "陈述", "说法", "表达", "答案", "结果")
_CMMMU_AMBIGUOUS = ("对错", "是否正确", "否正确", "或者", "是否", "正确性", "对不")


def _cmmmu_type(fields: Mapping[str, Any]) -> str:
    kind = fields.get("type")
    if kind not in CMMMU_INSTRUCTIONS:
        raise DocError(f"field 'type' must be one of {', '.join(CMMMU_INSTRUCTIONS)}, got {kind!r}")
    return kind


@DOC_PROCESSORS.register("cmmmu")
def cmmmu(row: dict[str, Any]) -> dict[str, Any]:
    """lmms-eval's CMMMU prompt parts (construct_prompt): `instruction` for the question type,
    `question_text` and `option_lines` ("选项：" and the four options as "(A) ..." for a
    multiple-choice question) with each `<img="file">` tag written `<图片 N>`, and `images`: the
    image fields those tags name, in the order they appear (cmmmu_doc_to_visual)."""
    kind = _cmmmu_type(row)
    option_lines = ""
    if kind == "选择":
        option_lines = "选项：\n" + "".join(f"({LETTERS[i]}) {row.get(f'option{i + 1}')}\n" for i in range(4)) + "\n"
    question = text_field(row, "question")
    for i in range(1, 6):
        tag, token = f'<img="{row.get(f"image_{i}_filename")}">', f"<图片 {i}>"
        question, option_lines = question.replace(tag, token), option_lines.replace(tag, token)
    names = [
        t.strip("<>").replace(" ", "_").replace("图片", "image")
        for t in _CMMMU_IMAGE_TOKEN.findall(question + option_lines)
    ]
    return {
        "instruction": CMMMU_INSTRUCTIONS[kind],
        "question_text": question,
        "option_lines": option_lines,
        "images": image_fields(row, names),
    }


def parse_cmmmu_choice(response: str, options: Sequence[Any]) -> str | None:
    """CMMMU's reading of a multiple-choice answer (get_multi_choice_prediction): the letters
    counted as "(A)", else as bare capitals anywhere, else by their option texts, and the most
    frequent ones joined in ABCD order; None where lmms-eval picks a random letter."""
    letters = LETTERS[: len(options)]
    response = " " + strip_chars(response, [",", ".", "!", "?", ";", ":", "'"]) + " "
    counts = Counter({c: response.count(f"({c})") for c in letters})
    if not +counts:
        counts = Counter({c: response.count(c) for c in letters})
    if not +counts and response.split():
        counts = Counter({c: response.count(o) for c, o in zip(letters, options, strict=True) if isinstance(o, str)})
    counts = +counts
    if not counts:
        return None
    most = max(counts.values())
    return "".join(c for c in letters if counts.get(c, 0) == most)


def parse_cmmmu_true_false(response: str) -> str | None:
    """CMMMU's reading of a true/false answer (get_TF_prediction, then eval_cmmmu's vote): its key
    parts without the ambiguous ones, each voting "对" (true) when it holds a positive word, else
    "错" (false) when it holds a negative one; None on a tie, where lmms-eval flips a coin."""
    response = response.strip("。").strip()
    parts = re.split(r"。|\n", response)
    keys = set(_key_responses(response, parts, _CMMMU_TRUE_FALSE_WORDS, []))
    keys = {k for k in keys if not any(word in k for word in _CMMMU_AMBIGUOUS)}
    positive = sum(1 for k in keys if any(word in k for word in _CMMMU_POSITIVE))
    negative = sum(1 for k in keys if not any(w in k for w in _CMMMU_POSITIVE) and any(w in k for w in _CMMMU_NEGATIVE))
    return "对" if positive > negative else "错" if negative > positive else None


def _cmmmu_normalize(text: str | None, answer: str) -> list[str | float | None]:
    """CMMMU's normalize_str: a number as a float rounded to 2 decimals, a text much longer than
    the answer dropped, any other text as it is."""
    if text is None:
        return [text]
    text = text.strip()
    if _is_number(text):
        return [round(float(text.replace(",", "")), 2)]
    if len(text) > len(answer) + 20 or _count_letters(text) > _count_letters(answer) + 2:
        return []
    return [text]


def _count_letters(text: str) -> int:
    # Precedence as in lmms-eval: (isalpha and lower-case ASCII) or upper-case ASCII.
    return sum(c.isalpha() and "a" <= c <= "z" or "A" <= c <= "Z" for c in text)


def parse_cmmmu_fill(response: str, answer: str) -> list[str | float | None]:
    """CMMMU's reading of a fill-in-the-blank answer (get_fill_blank_prediction): its key parts
    and every number in them, normalized against the answer, without duplicates."""
    response = response.strip("。").strip()
    parts = re.split(r"。|\n", response)
    words = ["是", "为", "所以", "等于", "方案", "选择", "正确答案", "因此", "最后", "答案", "结果"]
    keys = _key_responses(response, parts, words, ["="])
    numbers = [n for key in keys for pattern in (r"-?\d{1,3}(?:，\d{3})+", r"-?\d+(?:\.\d+)?[eE][+-]?\d+",
                                                 r"-?(?:\d+\.\d+|\.\d+|\d+)(?![eE][+-]?\d+)(?!，\d)")
               for n in re.findall(pattern, key)]  # fmt: skip
    return list(set(v for text in [*keys, *numbers] for v in _cmmmu_normalize(text, answer)))


def cmmmu_fill_correct(answer: str, candidates: Sequence[str | float | None]) -> bool:
    """CMMMU's fill-in-the-blank check: a string candidate contains the normalized answer, or a
    number candidate equals it."""
    return _matches(_cmmmu_normalize(answer, answer), candidates)


@EXTRACTORS.register("cmmmu")
def cmmmu_answer(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """The letter(s) of a multiple-choice answer (`parse_cmmmu_choice`), the verdict 对/错 of a
    true/false one (`parse_cmmmu_true_false`); a fill-in-the-blank answer as it is (the
    `cmmmu_acc` metric reads it, as its reading needs the reference)."""
    fields = fields or {}
    kind = _cmmmu_type(fields)
    if kind == "填空":
        return Extraction(text, "open")
    if kind == "选择":
        value, rule = parse_cmmmu_choice(text, [fields.get(f"option{i}") for i in range(1, 5)]), "cmmmu_choice"
    else:
        value, rule = parse_cmmmu_true_false(text), "cmmmu_true_false"
    return Extraction(value, rule) if value else Extraction(None, UNPARSED)


def cmmmu_acc(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> float:
    """1.0 when the answer is right by CMMMU's rules: equal to the answer for multiple-choice and
    true/false questions; `cmmmu_fill_correct` on `parse_cmmmu_fill` for fill-in-the-blank ones."""
    if prediction is None:
        return 0.0
    if _cmmmu_type(fields) != "填空":
        return float(prediction == targets[0])
    return float(cmmmu_fill_correct(targets[0], parse_cmmmu_fill(prediction, targets[0])))


METRICS.add("mmmu_acc", Metric("mmmu_acc", mmmu_acc))
METRICS.add("cmmmu_acc", Metric("cmmmu_acc", cmmmu_acc))
