"""Multiple-choice benchmarks (AI2D, ScienceQA-IMG, SEED-Bench, MMBench, RealWorldQA, MMStar; MMMU and
CMMMU are in `mmmu.py`) as lmms-eval 0.7.3 runs them: the doc processors that build its prompts, its answer
readings and its metrics.

Every reading here ports lmms-eval's (`lmms_eval/tasks/<task>/utils.py`, `_task_utils/mcq_extract.py`,
`_task_utils/mmmu_mcq_utils.py`) rule for rule, with one deliberate change: where lmms-eval falls
back to a random option (MMMU, CMMMU) or a coin flip (CMMMU true/false), the answer is unparsed
(None, scored wrong).
"""

from __future__ import annotations

import math
import re
import string
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fastmmeval.errors import DocError
from fastmmeval.extract import EXTRACTORS, UNPARSED, Extraction
from fastmmeval.extract.judge_assisted import JUDGE_ASSISTED
from fastmmeval.extract.rules import LETTERS
from fastmmeval.metrics import METRICS, Metric
from fastmmeval.tasks.processors import DOC_PROCESSORS

# --- shared helpers --------------------------------------------------------------------------


def text_field(row: Mapping[str, Any], name: str) -> str:
    """A string field of the row; a missing or non-string one is a DocError naming it."""
    value = row.get(name)
    if not isinstance(value, str):
        raise DocError(f"field {name!r} must be a string, got {type(value).__name__} {value!r}")
    return value


def image_fields(row: Mapping[str, Any], names: Sequence[str]) -> list[Any]:
    """The images of the fields `names`, in that order; a missing one is a DocError naming it."""
    missing = [n for n in names if row.get(n) is None]
    if missing:
        raise DocError(f"the prompt shows image field(s) {', '.join(missing)}, which hold no image")
    return [row[n] for n in names]


def strip_chars(text: str, chars: Sequence[str]) -> str:
    """`text` stripped of each of `chars` in turn (lmms-eval's `for char in [...]: s = s.strip(char)`)."""
    for char in chars:
        text = text.strip(char)
    return text


# --- AI2D ------------------------------------------------------------------------------------

_LETTER_DOT = re.compile(r"^\s*([A-Z])\.")
_NO_ASCII_PUNCTUATION = str.maketrans("", "", string.punctuation)


@DOC_PROCESSORS.register("ai2d")
def ai2d(row: dict[str, Any]) -> dict[str, Any]:
    """`answer_letter`: the option letter of AI2D's `answer`, an option index stored as a string."""
    answer, options = text_field(row, "answer"), row.get("options") or []
    if not answer.strip().isdigit() or int(answer) >= len(options):
        raise DocError(f"field 'answer' must be the index of one of the {len(options)} options, got {answer!r}")
    return {"answer_letter": LETTERS[int(answer)]}


@EXTRACTORS.register("ai2d_letter")
def ai2d_letter(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """The letter lmms-eval's AI2D scoring reads: `X.` at the start of the answer (its
    MultiChoiceRegexFilter), else the whole answer when, lower-cased and without ASCII punctuation
    (its exact_match with ignore_case and ignore_punctuation), it is a single letter: "(B)",
    "b" and "**B**" read as B; "The answer is B" and "B) cat" do not."""
    match = _LETTER_DOT.match(text)
    if match:
        return Extraction(match.group(1), "letter_dot")
    bare = text.strip().lower().translate(_NO_ASCII_PUNCTUATION)
    if len(bare) == 1 and bare in string.ascii_lowercase:
        return Extraction(bare.upper(), "bare_letter")
    return Extraction(None, UNPARSED)


# --- ScienceQA -------------------------------------------------------------------------------


@DOC_PROCESSORS.register("scienceqa")
def scienceqa(row: dict[str, Any]) -> dict[str, Any]:
    """`context`: "Context: <hint>\\n" when the doc has a hint, else empty (lmms-eval's sqa_doc_to_text)."""
    hint = row.get("hint")
    return {"context": f"Context: {hint}\n" if hint else ""}


@EXTRACTORS.register("scienceqa_letter")
def scienceqa_letter(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """The letter lmms-eval's ScienceQA scoring (sqa_process_results, after LLaVA) reads from the
    stripped answer: the whole answer when it is one character (any case), else its first
    character when that is upper case and followed by '.'."""
    answer = text.strip()
    if len(answer) == 1:
        return Extraction(answer.upper(), "single_char")
    if len(answer) >= 2 and answer[0].isupper() and answer[1] == ".":
        return Extraction(answer[0], "letter_dot")
    return Extraction(None, UNPARSED)


# --- SEED-Bench ------------------------------------------------------------------------------


@DOC_PROCESSORS.register("seedbench")
def seedbench(row: dict[str, Any]) -> dict[str, Any]:
    """`choices`: the four option texts `choice_a` .. `choice_d`."""
    return {"choices": [text_field(row, f"choice_{c}") for c in "abcd"]}


@EXTRACTORS.register("first_char")
def first_char(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """The first character of the stripped answer, upper-cased (lmms-eval's SEED-Bench reading,
    which compares it with the answer letter case-insensitively)."""
    answer = text.strip()
    return Extraction(answer[0].upper(), "first_char") if answer else Extraction(None, UNPARSED)


# --- MMBench ---------------------------------------------------------------------------------


def _missing(value: Any) -> bool:
    """Whether an MMBench cell is empty as pandas sees it (None, NaN) or holds the string "nan"."""
    return value is None or value == "nan" or (isinstance(value, float) and math.isnan(value))


@DOC_PROCESSORS.register("mmbench")
def mmbench(row: dict[str, Any]) -> dict[str, Any]:
    """`choices`: the option texts of the columns A-E that hold one; `hinted_question`: the question
    after the hint and a space when the doc has a hint (lmms-eval's mmbench_doc_to_text);
    `judge_question`: the bare question, which MMBench's option-matching judge is shown."""
    letters = [c for c in "ABCDE" if row.get(c) and not _missing(row.get(c))]
    if not letters or "".join(letters) != LETTERS[: len(letters)]:
        raise DocError(f"options must be columns A, B, ... without gaps, got {''.join(letters) or 'none'}")
    question, hint = text_field(row, "question"), row.get("hint")
    return {
        "choices": [str(row[c]) for c in letters],
        "hinted_question": question if _missing(hint) else f"{hint} {question}",
        "judge_question": question,
    }


_MMBENCH_MARKS = (("", ""), ("", "."), ("", ","), ("", ":"), ("", ")"), ("", ")."), ("(", ")"), ("(", ")."),
                  (":", ""), (":", ","), (":", "."), (":", ")"), (":", ")."))  # fmt: skip


def mmbench_can_infer(reply: str, options: Sequence[str]) -> str | None:
    """The letter MMBench's evaluator (lmms-eval 0.7.3 `MMBench_Evaluator.can_infer`) reads in a
    reply: the one of A-E standing alone among its words, bare or with one of _MMBENCH_MARKS
    (a bare "A" in a reply of more than three words may be the article and is not taken), else the
    one option (of the first four) whose text the reply contains; None when none or several."""
    words = [w.strip() for w in reply.split()]
    for k, (prefix, suffix) in enumerate(_MMBENCH_MARKS):
        found = [c for c in "ABCDE" if prefix + c + suffix in words]
        if len(found) == 1 and not (k == 0 and "A" in words and len(words) > 3):
            return found[0]
    lower = reply.lower()
    hits = [LETTERS[i] for i, option in enumerate(options[:4]) if str(option).lower() in lower]
    return hits[0] if len(hits) == 1 else None


@EXTRACTORS.register("mmbench_judge")
def mmbench_rules(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """The option lmms-eval's MMBench evaluator reads in the stripped answer before it asks GPT
    (MMBench_Evaluator.prefetch_answer, its can_infer: `mmbench_can_infer`): the one letter of A-E
    standing alone among the words, bare or marked like "(B)" or "B.", rule `letter`; else the one
    option text inside the answer, rule `option_text`; else unparsed, and the run's judge is asked
    with MMBench's matching prompt (mmbench_official)."""
    answer = text.strip()
    letter = mmbench_can_infer(answer, options)
    if letter is None:
        return Extraction(None, UNPARSED)
    return Extraction(letter, "letter" if mmbench_can_infer(answer, ()) == letter else "option_text")


JUDGE_ASSISTED["mmbench_judge"] = "mmbench_official"


# --- MMStar and RealWorldQA: lmms-eval's shared MCQ reading ----------------------------------

_ANSWER_PHRASES = (
    "the answer is", "answer is", "the correct answer is", "correct answer is", "the best answer is",
    "best answer is", "the correct option is", "correct option is", "the best option is", "best option is",
    "the choice is", "choice is", "the correct choice is", "correct choice is", "i choose", "i select", "i pick",
    "my answer is", "my choice is", "옵션", "정답은", "답은", "답:", "答案是", "答案为", "选", "答えは",
)  # fmt: skip
_FORMAT_PRIORITY = {"start": 10, "end": 9, "phrase": 7, "parentheses": 6, "period": 5, "colon": 4,
                    "right_paren": 3, "space": 2, "fallback": 0}  # fmt: skip
_WRAPPED = (("parentheses", "({})"), ("period", "{}."), ("colon", "{}:"), ("right_paren", "{})"), ("space", "{} "))


def extract_mcq_answer(response: str, choices: Sequence[str] = "ABCD") -> Extraction:
    """lmms-eval's `extract_mcq_answer`: every letter of `choices` found in one of its formats
    ("(B)", "B.", "B:", "B)", "B ", after "the answer is", standing at the start or the end), the
    last one of the highest-priority format winning; only when none is found, any occurrence of a
    letter (rule `fallback`). The rule is the winning format; no letter at all is unparsed."""
    if not response.strip():
        return Extraction(None, UNPARSED)
    text = " " + strip_chars(response.strip(), [",", ".", "!", "?", ";", ":", "'", '"']) + " "
    candidates: list[tuple[str, int, str]] = []
    for name, form in _WRAPPED:
        candidates += [(ch, text.rfind(form.format(ch)), name) for ch in choices if form.format(ch) in text]
    lowered = text.lower()
    for phrase in _ANSWER_PHRASES:
        at = lowered.find(phrase)
        if at != -1:
            found = [(ch, text.find(ch, at + len(phrase))) for ch in choices]
            candidates += [(ch, pos, "phrase") for ch, pos in found if pos != -1]
    stripped = text.strip()
    candidates += [(ch, 0, "start") for ch in choices
                   if stripped.startswith(ch) and (len(stripped) == 1 or not stripped[1].isalpha())]  # fmt: skip
    candidates += [(ch, len(text) - 1, "end") for ch in choices
                   if stripped.endswith(ch) and (len(stripped) == 1 or not stripped[-2].isalpha())]  # fmt: skip
    if not candidates:
        candidates = [(ch, text.rfind(ch), "fallback") for ch in choices if ch in text]
    if not candidates:
        return Extraction(None, UNPARSED)
    letter, _, rule = sorted(candidates, key=lambda c: (_FORMAT_PRIORITY[c[2]], c[1]), reverse=True)[0]
    return Extraction(letter, rule)


@EXTRACTORS.register("mcq_extract")
def mcq_extract(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """lmms-eval's `extract_mcq_answer` over the doc's option letters (A-D when the options are
    written inside the question, as in MMStar and RealWorldQA)."""
    return extract_mcq_answer(text, LETTERS[: len(options)] if options else "ABCD")


@DOC_PROCESSORS.register("mmstar")
def mmstar(row: dict[str, Any]) -> dict[str, Any]:
    """`question_text`: the stripped question without " Please answer yes or no." (lmms-eval's
    mmstar_doc_to_text drops it before adding its own instruction)."""
    return {"question_text": text_field(row, "question").strip().replace(" Please answer yes or no.", "")}


MMSTAR_CATEGORIES = ("coarse perception", "fine-grained perception", "instance reasoning", "logical reasoning",
                     "science & technology", "math")  # fmt: skip


def mmstar_score(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> dict[str, Any]:
    """{"category", "l2_category", "correct"} for one MMStar question."""
    for name in ("category", "l2_category"):
        if not isinstance(fields.get(name), str):
            raise DocError(f"mmstar: field {name!r} must be a string, got {fields.get(name)!r}")
    correct = prediction is not None and prediction == targets[0].strip().upper()
    return {"category": fields["category"], "l2_category": fields["l2_category"], "correct": correct}


def mmstar_aggregate(category: str | None) -> Callable[[Sequence[Mapping[str, Any]]], float]:
    """The mean over the L2 categories of their accuracy, over the questions of `category` (all
    questions when None), as lmms-eval's mmstar_aggregate_results; nan without questions."""

    def aggregate(items: Sequence[Mapping[str, Any]]) -> float:
        by_l2: dict[str, list[bool]] = defaultdict(list)
        for item in items:
            if category is None or item["category"] == category:
                by_l2[item["l2_category"]].append(bool(item["correct"]))
        return sum(sum(v) / len(v) for v in by_l2.values()) / len(by_l2) if by_l2 else float("nan")

    return aggregate


# One metric per lmms-eval result key ("average" and each category), so that `as:` can name them exactly.
for _category in (None, *MMSTAR_CATEGORIES):
    _name = "mmstar_" + ("average" if _category is None else re.sub(r"\W+", "_", _category))
    METRICS.add(_name, Metric(_name, mmstar_score, mmstar_aggregate(_category), stderr="bootstrap"))


@DOC_PROCESSORS.register("realworldqa")
def realworldqa(row: dict[str, Any]) -> dict[str, Any]:
    """`question_text`: the stripped question; `answer_key`: the answer as lmms-eval compares it
    (an option letter A-D upper-cased, any other answer lower-cased), both stripped."""
    answer = text_field(row, "answer").strip()
    is_letter = answer.upper() in ("A", "B", "C", "D")
    return {
        "question_text": text_field(row, "question").strip(),
        "answer_key": answer.upper() if is_letter else answer.lower(),
    }


@EXTRACTORS.register("realworldqa")
def realworldqa_answer(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """lmms-eval's RealWorldQA reading, which depends on the kind of reference answer: for an
    option letter, `extract_mcq_answer` over A-D; for a word or number, the answer lower-cased,
    stripped and without trailing dots."""
    answer = text_field(fields or {}, "answer").strip()
    if answer.upper() in ("A", "B", "C", "D"):
        return extract_mcq_answer(text, "ABCD")
    return Extraction(text.lower().strip().rstrip("."), "open")
