"""MP-DocVQA (questions over documents of up to 20 scanned pages) as lmms-eval 0.7.3's
multidocvqa_val runs it: every page of the document as one image, in page order, and ANLS and
accuracy as MP-DocVQA's own Evaluator computes them (lmms-eval's multidocvqa/utils.py copies it).

MP-DocVQA's Evaluator is not DocVQA's `anls` (`metrics/vqa.py`): strings are lower-cased and
stripped but whitespace runs inside them are kept, lengths are those of the strings compared (so
lmms-eval's DocVQA raw-length bug does not arise here), and the answer "none" scores 0 on both
metrics, even where a reference is "none".
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.errors import DocError
from fastmmeval.metrics import METRICS, Metric
from fastmmeval.metrics.edit_distance import levenshtein_similarities
from fastmmeval.metrics.vqa import ANLS_THRESHOLD
from fastmmeval.tasks.processors import DOC_PROCESSORS, text_field

# The hub rows hold a document's pages in image_1 .. image_20 (None past its last page).
MAX_PAGES = 20
# The answer MP-DocVQA's Evaluator scores 0 whatever the references say.
NO_ANSWER = "none"


@DOC_PROCESSORS.register("multidocvqa")
def multidocvqa(row: dict[str, Any]) -> dict[str, Any]:
    """`pages`: the document's page images, image_1 to image_20 in that order, those that are None
    left out (lmms-eval's multidocvqa_doc_to_visual); `answer_list`: the references, which the hub
    stores in `answers` as a Python list literal."""
    raw = text_field(row, "answers", "multidocvqa")
    try:
        answers = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        raise DocError(f"multidocvqa: field 'answers' is not a Python list literal: {raw[:80]!r}") from None
    if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
        raise DocError(f"multidocvqa: field 'answers' must hold a list of strings, got {raw[:80]!r}")
    pages = [row[f"image_{i}"] for i in range(1, MAX_PAGES + 1) if row.get(f"image_{i}") is not None]
    return {"pages": pages, "answer_list": answers}


def normalize_multidocvqa_answer(text: str) -> str:
    """Lower-cased and stripped (MP-DocVQA's `_preprocess_str`, case-insensitive)."""
    return text.lower().strip()


def multidocvqa_anls(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any] | None = None) -> float:
    """MP-DocVQA's ANLS of one question: 1 - Levenshtein distance / the longer length of the
    normalized prediction and reference (`normalize_multidocvqa_answer`), best over the references,
    0 below 0.5; an empty answer or "none" scores 0."""
    if prediction is None:
        return 0.0
    pred = normalize_multidocvqa_answer(prediction)
    if not pred or pred == NO_ANSWER:
        return 0.0
    refs = [normalize_multidocvqa_answer(t) for t in targets]
    best = max(levenshtein_similarities([pred] * len(refs), refs).tolist(), default=0.0)
    return best if best >= ANLS_THRESHOLD else 0.0


def multidocvqa_accuracy(
    prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any] | None = None
) -> float:
    """MP-DocVQA's accuracy of one question: 1.0 when the normalized prediction equals a normalized
    reference (`normalize_multidocvqa_answer`), else 0.0; "none" scores 0 (an empty answer does not,
    when a reference is empty)."""
    if prediction is None:
        return 0.0
    pred = normalize_multidocvqa_answer(prediction)
    if pred == NO_ANSWER:
        return 0.0
    return float(any(normalize_multidocvqa_answer(t) == pred for t in targets))


METRICS.add("multidocvqa_anls", Metric("multidocvqa_anls", multidocvqa_anls))
METRICS.add("multidocvqa_accuracy", Metric("multidocvqa_accuracy", multidocvqa_accuracy))
