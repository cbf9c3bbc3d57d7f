"""Option letters of multiple-choice answers, after VLMEvalKit's matching rules.

Mirrors `can_infer_option`, `can_infer_text` and `can_infer` in VLMEvalKit's
`vlmeval/utils/matching_util.py` (open-compass/VLMEvalKit, read at commit 18fc37a5), the rules
MMBench, SEED-Bench, AI2D, MMStar and friends use before (or instead of) a judge model.
Differences, all of them on the side of reading fewer answers by accident:

- the text is NFKC-folded first, so full-width forms (`（Ｂ）`) read as ASCII;
- the article rule (a lone "A" in an answer of more than three words is taken for the article,
  not the letter) always applies; upstream applies it only when the VERBOSE environment variable
  is set. It skips a wrapped A (`A.`, `(A)`, `A:`, `**A**`), which is never the article;
- a refusal, or a lone `Z` ("none of the options" in VLMEvalKit's judge prompt), is recorded as no
  answer (scored wrong) with its own rule instead of the letter 'Z';
- empty option texts never match (upstream, '' is inside every answer);
- the part after the last "The answer is" / "Answer:" is read first, then the whole answer.

An answer the rules cannot read is `unparsed` and scored wrong; it is never replaced by a guess
(lmms-eval's MMBench and MMMU fall back to a random letter).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.extract.base import EXTRACTORS, UNPARSED, Extraction
from fastmmeval.extract.rules import LETTERS, answer_part, fold

# VLMEvalKit's reject_to_answer list (exact, case-sensitive substrings).
REJECT_TO_ANSWER = (
    "Sorry, I can't help with images of people yet.",
    "I can't process this file.",
    "I'm sorry, but without the image provided",
    "Cannot determine the answer",
)
_PUNCTUATION = ".()[],:;!*#{}"
_TABLE = str.maketrans(_PUNCTUATION, " " * len(_PUNCTUATION))


def _tokens(text: str) -> list[str]:
    return text.translate(_TABLE).split()


def can_infer_option(answer: str, letters: str) -> Extraction | None:
    """The one option letter standing alone in `answer` (punctuation counts as space), a
    refusal, or None when the letters do not decide (none, several, or the article 'A')."""
    if any(phrase in answer for phrase in REJECT_TO_ANSWER):
        return Extraction(None, "refusal")
    splits = _tokens(answer)
    found = [c for c in letters if c in splits]
    if len(found) == 1:
        bare_a = "A" in answer.split()  # the article is written bare, never as "A." or "(A)"
        wrapped_a = any(tok != "A" and _tokens(tok) == ["A"] for tok in answer.split())
        if found == ["A"] and len(splits) > 3 and bare_a and not wrapped_a:
            return None
        return Extraction(found[0], "letter")
    if not found and "Z" in splits:
        return Extraction(None, "none_of_the_options")
    return None


def can_infer_text(answer: str, options: Sequence[str], letters: str) -> Extraction | None:
    """The letter of the one option whose text occurs in `answer` (case-insensitive
    substring), or None when no option or several do."""
    lowered = answer.lower()
    pairs = zip(letters, options, strict=False)  # an option past Z has no letter
    hits = [letter for letter, option in pairs if option and option.lower() in lowered]
    return Extraction(hits[0], "option_text") if len(hits) == 1 else None


def can_infer(answer: str, options: Sequence[str], letters: str) -> Extraction | None:
    """`can_infer_option`, else `can_infer_text` (VLMEvalKit's `can_infer`)."""
    return can_infer_option(answer, letters) or can_infer_text(answer, options, letters)


@EXTRACTORS.register("option_letter")
def option_letter(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """The chosen option's letter by VLMEvalKit's rules (a standalone or wrapped letter, else the
    one option text in the answer), the part after 'The answer is' first; never a guess.
    Without options the letters are A-D."""
    answer = fold(text)
    folded = [fold(o) for o in options]
    letters = LETTERS[: len(options)] if options else LETTERS[:4]
    body, prefix = answer_part(answer)
    if prefix:
        found = can_infer(body, folded, letters)
        if found is not None:
            return Extraction(found.value, prefix + found.rule)
    return can_infer(answer, folded, letters) or Extraction(None, UNPARSED)
