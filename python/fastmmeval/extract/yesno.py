"""Yes/no answers: a generic rule and the MME and POPE conventions."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.extract.base import EXTRACTORS, UNPARSED, Extraction
from fastmmeval.extract.rules import fold


@EXTRACTORS.register("yes_no")
def yes_no(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """'yes' or 'no' when that word appears (case-insensitive); when both do, the first
    (rule `yes_no_first`); neither is unparsed."""
    words = re.findall(r"[a-z]+", fold(text).lower())
    found = [w for w in words if w in ("yes", "no")]
    if not found:
        return Extraction(None, UNPARSED)
    rule = "yes_no_single" if len(set(found)) == 1 else "yes_no_first"
    return Extraction(found[0], rule)


@EXTRACTORS.register("yes_no_mme")
def yes_no_mme(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """MME's reading, as lmms-eval's `parse_pred_ans` in `tasks/mme/utils.py` ("brought from
    Otter"): lower-cased, stripped, periods removed; exactly 'yes'/'no', or 'y'/'n', or else
    'yes' (then 'no') inside the first four characters; anything else is unparsed (MME's 'other',
    scored wrong). The official MME tool (`metrics.mme.mme_answer`) keeps periods and has no
    'y'/'n' rule."""
    answer = text.lower().strip().replace(".", "")
    if answer in ("yes", "no"):
        return Extraction(answer, "mme_exact")
    if len(answer) == 1:
        if answer in ("y", "n"):
            return Extraction("yes" if answer == "y" else "no", "mme_letter")
        return Extraction(None, UNPARSED)
    prefix = answer[:4]
    if "yes" in prefix:
        return Extraction("yes", "mme_prefix")
    if "no" in prefix:
        return Extraction("no", "mme_prefix")
    return Extraction(None, UNPARSED)


@EXTRACTORS.register("yes_no_pope")
def yes_no_pope(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """POPE's reading, as the official evaluation (RUCAIBox/POPE `evaluate.py`, copied by LLaVA's
    `eval_pope.py`): keep the text before the first '.', drop commas, split on single spaces;
    the word 'No', 'no' or 'not' means 'no' (rule `pope_no_word`), anything else is 'yes' (rule
    `pope_default_yes`, so hedges and refusals count as yes, as upstream).

    The response is stripped first (LLaVA writes stripped answers); an empty response is unparsed
    instead of upstream's 'yes'. Case and word boundaries are upstream's: 'NO', 'Nope',
    'No!' and "isn't" read as yes."""
    answer = text.strip()
    if not answer:
        return Extraction(None, UNPARSED)
    words = answer.split(".")[0].replace(",", "").split(" ")
    if "No" in words or "not" in words or "no" in words:
        return Extraction("no", "pope_no_word")
    return Extraction("yes", "pope_default_yes")
