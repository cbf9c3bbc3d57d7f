"""MME as lmms-eval 0.7.3 runs it: the question as its prompt hook leaves it (`mme_question`), the
answer read as lmms-eval reads it (`yes_no_mme`), and acc and acc+ per subtask with the perception /
cognition totals as the official MME calculation tool (BradyFU/Awesome-Multimodal-Large-Language-Models,
eval_tool/calculation.py) computes them (`mme`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.errors import DocError
from fastmmeval.extract.base import EXTRACTORS, UNPARSED, Extraction
from fastmmeval.metrics.base import METRICS, Metric
from fastmmeval.tasks.processors import DOC_PROCESSORS

PERCEPTION = (
    "existence", "count", "position", "color", "posters", "celebrity", "scene", "landmark", "artwork", "OCR",
)  # fmt: skip
COGNITION = ("commonsense_reasoning", "numerical_calculation", "text_translation", "code_reasoning")
# Doc fields read, first present wins. lmms-lab/MME: `category`, and `question_id`, which is the
# image's path and so is shared by the two questions about one image.
CATEGORY_FIELDS = ("category", "subtask")
IMAGE_FIELDS = ("question_id", "image_id", "image_path", "image_name")


# MME's questions end with this; lmms-eval drops it whenever a post-prompt replaces it.
MME_YES_NO = " Please answer yes or no."


@DOC_PROCESSORS.register("mme_question")
def mme_question(row: dict[str, Any]) -> dict[str, str]:
    """`question_stripped`: the question as lmms-eval's `mme_doc_to_text` leaves it under its
    default (non-empty) post-prompt: stripped, without MME's own " Please answer yes or no."."""
    return {"question_stripped": str(row["question"]).strip().replace(MME_YES_NO, "")}


@EXTRACTORS.register("yes_no_mme")
def yes_no_mme(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """MME's reading, as lmms-eval's `parse_pred_ans` in `tasks/mme/utils.py` ("brought from
    Otter"): lower-cased, stripped, periods removed; exactly 'yes'/'no', or 'y'/'n', or else
    'yes' (then 'no') inside the first four characters; anything else is unparsed (MME's 'other',
    scored wrong). The official MME tool (`mme_answer`) keeps periods and has no
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


def mme_answer(text: str) -> str:
    """The official reading of an answer: lower-cased; exactly "yes" or "no" is that answer,
    otherwise "yes" when its first four characters contain "yes", "no" when they contain "no",
    else "other"."""
    text = text.lower()
    if text in ("yes", "no"):
        return text
    head = text[:4]
    return "yes" if "yes" in head else "no" if "no" in head else "other"


def _field(fields: Mapping[str, Any], names: Sequence[str], what: str) -> str:
    for name in names:
        if name in fields and fields[name] is not None:
            return str(fields[name])
    raise DocError(f"mme: the doc has no {what} field (looked for {', '.join(names)})")


def mme_score(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> dict[str, Any]:
    """{"category", "image", "correct"} for one question. The answer is stripped of surrounding
    whitespace, then read as `mme_answer`; None (unparsed) is wrong. The category and image come
    from the first present of CATEGORY_FIELDS and IMAGE_FIELDS."""
    if len(targets) != 1:
        raise DocError(f"mme: expected one target, got {len(targets)}")
    label = targets[0].strip().lower()
    if label not in ("yes", "no"):
        raise DocError(f"mme: the target must be yes or no, got {targets[0]!r}")
    return {
        "category": _field(fields, CATEGORY_FIELDS, "category"),
        "image": _field(fields, IMAGE_FIELDS, "image id"),
        "correct": prediction is not None and mme_answer(prediction.strip()) == label,
    }


def mme_aggregate(items: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Per category `<category>_acc` (questions right, %), `<category>_acc_plus` (images with
    every question right, %) and `<category>_score` (their sum, at most 200); `perception_score`
    and `cognition_score`, the sums of the scores of the categories of PERCEPTION and COGNITION
    that have items (at most 2000 and 800; absent when none has). A category in neither list is
    reported alone.

    Deliberate differences from lmms-eval 0.7.3 (`lmms_eval/tasks/mme/utils.py`): it reads
    answers with Otter's parser, which deletes every '.' and takes a lone "y" / "n" as yes / no
    (the official tool: "other", wrong); and it asserts that each image has exactly two
    questions, where an image here may have any number (with --limit) and counts for acc+ when
    all of them are right. It also adds unknown categories to the cognition total.
    """
    images: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for item in items:
        images[item["category"]][item["image"]].append(bool(item["correct"]))
    out: dict[str, float] = {}
    for category, by_image in images.items():
        answers = [c for correct in by_image.values() for c in correct]
        acc = 100 * (sum(answers) / len(answers))  # fractions first, then percent, as the official tool
        acc_plus = 100 * (sum(all(correct) for correct in by_image.values()) / len(by_image))
        out[f"{category}_acc"], out[f"{category}_acc_plus"], out[f"{category}_score"] = acc, acc_plus, acc + acc_plus
    for total, categories in (("perception_score", PERCEPTION), ("cognition_score", COGNITION)):
        present = [out[f"{c}_score"] for c in categories if c in images]
        if present:
            out[total] = sum(present)
    return out


def perception_to_100(value: float) -> float:
    """The perception score (at most 2000, the figure papers report as "MME") on 0-100."""
    return value / 20.0


# The bootstrap resamples images (both questions of one together), as acc+ is per image.
METRICS.add(
    "mme",
    Metric("mme", mme_score, mme_aggregate, stderr="bootstrap", to_100=perception_to_100,
           headline="perception_score", cluster="image"),
)  # fmt: skip
