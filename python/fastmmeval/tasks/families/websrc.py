"""WebSRC (questions about web page screenshots, answered by a span of the page or yes/no) as
lmms-eval 0.7.3's websrc_val scores it: the screenshot decoded from the hub's base64 text, and
lmms-eval's token F1 (`evaluate_websrc`), overall and per domain, plus WebSRC's exact match.

lmms-eval's F1 is not SQuAD's: both strings are lower-cased and stripped, then split into words
(`\\w+`) and single punctuation marks, and precision and recall count the *distinct* tokens the
two share (sets, not SQuAD's multisets; punctuation and articles are tokens, "Yes." against "yes"
is 2/3). An empty answer or prediction scores 0.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.errors import DocError
from fastmmeval.metrics import METRICS, Metric
from fastmmeval.metrics.base import mean
from fastmmeval.metrics.squad import squad_exact_match
from fastmmeval.tasks.processors import DOC_PROCESSORS, text_field

# lmms-eval's DOMAINS, the `domain` values of WebSRC, in the order of its report.
WEBSRC_DOMAINS = (
    "auto", "book", "camera", "game", "jobs", "movie", "phone", "restaurant", "sports", "university", "hotel",
)  # fmt: skip
_TOKEN = re.compile(r"\w+|[^\w\s]")


@DOC_PROCESSORS.register("websrc")
def websrc(row: dict[str, Any]) -> dict[str, Any]:
    """`screenshot`: the bytes of the page screenshot, which the hub stores in `image` as base64
    text (decoded as lmms-eval's websrc_doc_to_visual does: characters outside the alphabet are
    skipped)."""
    try:
        return {"screenshot": base64.b64decode(text_field(row, "image", "websrc"))}
    except binascii.Error as e:
        raise DocError(f"websrc: field 'image' is not base64 text: {e}") from None


def websrc_tokens(text: str) -> set[str]:
    """The distinct tokens of `text` lower-cased and stripped: words and single punctuation marks."""
    return set(_TOKEN.findall(text.lower().strip()))


def websrc_f1(prediction: str, answer: str) -> float:
    """lmms-eval's WebSRC F1 of one prediction against the answer, over `websrc_tokens` (0.0 when
    either has no token)."""
    pred, gold = websrc_tokens(prediction), websrc_tokens(answer)
    common = len(pred & gold)
    if not pred or not gold or not common:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def websrc_score(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> dict[str, Any]:
    """{"domain": the doc's `domain`, "f1": `websrc_f1`, "exact": WebSRC's exact match
    (`squad_exact_match`)}, each the best over the targets, for one question; None scores 0."""
    domain = fields.get("domain")
    if prediction is None:
        return {"domain": domain, "f1": 0.0, "exact": 0}
    return {
        "domain": domain,
        "f1": max(websrc_f1(prediction, t) for t in targets),
        "exact": max(squad_exact_match(prediction, t) for t in targets),
    }


def websrc_aggregate(items: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """squad_f1: the mean F1 over all questions, whatever their domain (lmms-eval's
    websrc_squad_f1); squad_f1_<domain>: the mean F1 of each of WebSRC's domains with questions
    (the table lmms-eval prints); exact_match: the fraction of questions answered exactly
    (WebSRC's EM; lmms-eval has none)."""
    out = {"squad_f1": mean([item["f1"] for item in items])}
    for domain in WEBSRC_DOMAINS:
        scores = [item["f1"] for item in items if item["domain"] == domain]
        if scores:
            out[f"squad_f1_{domain}"] = mean(scores)
    out["exact_match"] = mean([item["exact"] for item in items])
    return out


# Headline: the overall F1, a fraction, so percent on 0-100.
METRICS.add("websrc", Metric("websrc", websrc_score, websrc_aggregate, stderr="bootstrap", headline="squad_f1"))
