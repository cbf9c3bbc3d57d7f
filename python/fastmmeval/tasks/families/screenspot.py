"""ScreenSpot (SeeClick's GUI grounding benchmark) as lmms-eval 0.7.3 runs it.

screenspot_rec_test: the model gives the box of the screen element an instruction names. The
`screenspot_click` extractor reads the answer as lmms-eval's `parse_float_sequence_within` does
(the first bracketed four numbers; when one is over 1, all are per mille and divided by 1000),
and also a bracketed point `(x, y)` (same scaling), which lmms-eval does not read. Coordinates are
fractions of the screenshot's width and height, as the dataset's `bbox` (x1, y1, x2, y2). The
`screenspot_rec` metric scores lmms-eval's IoU, ACC@IoU thresholds and Center_ACC (the box's
centre inside the target box), and the click accuracy (Click_ACC: the point answered, or the box's
centre, inside the target box) overall, per platform and per element type.

screenspot_reg_test: the target region outlined in red (`screenspot_region`) and its box in the
prompt; the model writes the instruction, scored by CIDEr (`metrics/caption.py`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from PIL import ImageDraw

from fastmmeval.errors import DocError, FailureKind
from fastmmeval.extract.base import EXTRACTORS, UNPARSED, Extraction
from fastmmeval.metrics import METRICS, Metric
from fastmmeval.metrics.base import mean
from fastmmeval.tasks.processors import DOC_PROCESSORS, text_field
from fastmmeval.tasks.render import load_image

_NUMBER = r"(-?\d+(?:\.\d+)?)"
# lmms-eval's pattern (utils_rec.parse_float_sequence_within), and the same for two numbers.
BOX = re.compile(rf"[\[\(]\s*{_NUMBER},\s*{_NUMBER},\s*{_NUMBER},\s*{_NUMBER}\s*[\]\)]")
POINT = re.compile(rf"[\[\(]\s*{_NUMBER},\s*{_NUMBER}\s*[\]\)]")
IOU_THRESHOLDS = ("0.1", "0.3", "0.5", "0.7", "0.9")
PLATFORMS = ("mobile", "desktop", "web")
ELEMENTS = ("text", "icon")


def _coordinates(match: re.Match[str], rule: str) -> Extraction:
    """The matched numbers as a JSON list, divided by 1000 when any is over 1 (per mille)."""
    numbers = [float(g) for g in match.groups()]
    if max(numbers) > 1:
        numbers, rule = [x / 1000 for x in numbers], f"{rule}_per_mille"
    return Extraction(json.dumps(numbers), rule)


@EXTRACTORS.register("screenspot_click")
def screenspot_click(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """The first bracketed box `[x1, y1, x2, y2]` in the response (rule `box`), else the first
    bracketed point `(x, y)` (rule `point`), as a JSON list of fractions of the screen; `_per_mille`
    is added to the rule when the numbers were on a 0-1000 scale. Anything else is unparsed."""
    for pattern, rule in ((BOX, "box"), (POINT, "point")):
        match = pattern.search(text)
        if match:
            return _coordinates(match, rule)
    return Extraction(None, UNPARSED)


def screenspot_platform(data_source: str) -> str:
    """mobile, desktop or web, from a `data_source` as lmms-eval groups them: a name containing
    ios or android is mobile, macos or windows desktop, any other web (shop, forum, gitlab, tool)."""
    if "ios" in data_source or "android" in data_source:
        return "mobile"
    if "macos" in data_source or "windows" in data_source:
        return "desktop"
    return "web"


def iou(target: Sequence[float], box: Sequence[float]) -> float:
    """Intersection over union of two (x1, y1, x2, y2) boxes; 0 when they do not overlap (also when
    a box is flipped, x2 < x1 or y2 < y1, or empty)."""
    width = min(target[2], box[2]) - max(target[0], box[0])
    height = min(target[3], box[3]) - max(target[1], box[1])
    if width <= 0 or height <= 0:
        return 0.0
    intersection = width * height
    area = (target[2] - target[0]) * (target[3] - target[1]) + (box[2] - box[0]) * (box[3] - box[1])
    return intersection / (area - intersection)


def inside(target: Sequence[float], x: float, y: float) -> bool:
    """Whether the point lies in the (x1, y1, x2, y2) box, its edges included."""
    return target[0] <= x <= target[2] and target[1] <= y <= target[3]


def _target_box(fields: Mapping[str, Any]) -> list[float]:
    bbox = fields.get("bbox")
    if (
        not isinstance(bbox, (list, tuple))
        or len(bbox) != 4
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in bbox)
    ):
        raise DocError(f"screenspot: field 'bbox' must hold 4 numbers (x1, y1, x2, y2), got {bbox!r}")
    return [float(v) for v in bbox]


def _answer(prediction: str | None) -> list[float]:
    """The coordinates `screenspot_click` extracted ([] when unparsed)."""
    if prediction is None:
        return []
    try:
        answer = json.loads(prediction)
    except ValueError:
        answer = None
    if not isinstance(answer, list) or len(answer) not in (2, 4):
        raise DocError(f"screenspot_rec scores the screenspot_click extractor's answers, got {prediction!r}")
    return answer


def screenspot_rec_score(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> dict[str, Any]:
    """{"iou", "center" (1 when the answered box's centre is in the target box), "click" (1 when the
    answered point, or the box's centre, is), "platform", "element" (text or icon)} for one doc; an
    unparsed answer scores 0 on all three, a point answer 0 on iou and center (lmms-eval reads
    only boxes)."""
    target = _target_box(fields)
    platform = screenspot_platform(text_field(fields, "data_source", "screenspot"))
    element = "text" if text_field(fields, "data_type", "screenspot") == "text" else "icon"
    answer = _answer(prediction)
    box = answer if len(answer) == 4 else None
    if box is not None:
        click: tuple[float, ...] | None = ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)
    else:
        click = tuple(answer) if answer else None
    hit = click is not None and inside(target, *click)
    return {
        "iou": iou(target, box) if box is not None else 0.0,
        "center": int(box is not None and hit),
        "click": int(hit),
        "platform": platform,
        "element": element,
    }


def screenspot_rec_aggregate(items: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """IoU (mean), ACC@0.1 ... ACC@0.9 (share with IoU at least the threshold) and Center_ACC,
    lmms-eval's values; then Click_ACC, overall, per platform (Click_ACC-mobile), per element type
    (Click_ACC-text) and per both (Click_ACC-mobile_text, lmms-eval's breakdown names); a breakdown
    without docs is left out."""
    ious = [item["iou"] for item in items]
    out = {"IoU": mean(ious)}
    out.update({f"ACC@{t}": mean([float(v >= float(t)) for v in ious]) for t in IOU_THRESHOLDS})
    out["Center_ACC"] = mean([item["center"] for item in items])
    out["Click_ACC"] = mean([item["click"] for item in items])
    for platform in (None, *PLATFORMS):
        for element in (None, *ELEMENTS):
            name = "_".join(n for n in (platform, element) if n)
            clicks = [
                item["click"] for item in items
                if platform in (None, item["platform"]) and element in (None, item["element"])
            ]  # fmt: skip
            if name and clicks:
                out[f"Click_ACC-{name}"] = mean(clicks)
    return out


# Headline: Center_ACC, the centre accuracy SeeClick reports, a fraction, so percent on 0-100.
METRICS.add(
    "screenspot_rec",
    Metric("screenspot_rec", screenspot_rec_score, screenspot_rec_aggregate, stderr="bootstrap", headline="Center_ACC"),
)


@DOC_PROCESSORS.register("screenspot_region")
def screenspot_region(row: dict[str, Any]) -> dict[str, Any]:
    """`boxed_image`: the screenshot with the target `bbox` (fractions of its size) outlined in red,
    3 pixels wide, and `region`: the box as "[x1, y1, x2, y2]" with two decimals, as lmms-eval's
    `screenspot_bbox_doc_to_visual` and `screenspot_doc_to_text` show them."""
    x1, y1, x2, y2 = _target_box(row)
    if row.get("image") is None:
        raise DocError("missing image field 'image'", FailureKind.MISSING_IMAGE_FIELD)
    image = load_image(row["image"], None, "field 'image'")[0].image  # a converted copy: the row's stays unmarked
    width, height = image.size
    ImageDraw.Draw(image).rectangle([x1 * width, y1 * height, x2 * width, y2 * height], outline="red", width=3)
    return {"boxed_image": image, "region": f"[{x1:.2f}, {y1:.2f}, {x2:.2f}, {y2:.2f}]"}
