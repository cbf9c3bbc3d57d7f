"""Captioning benchmarks: COCO, Flickr30k, NoCaps, TextCaps and RefCOCO region captions."""

from __future__ import annotations

from typing import Any

from PIL import ImageDraw

from fastmmeval.errors import DocError, FailureKind
from fastmmeval.tasks.processors import DOC_PROCESSORS
from fastmmeval.tasks.render import load_image


@DOC_PROCESSORS.register("refcoco_bbox")
def refcoco_bbox(row: dict[str, Any]) -> dict[str, Any]:
    """`boxed_image`: the row's `image` with its region `bbox` (x, y, width, height) outlined in red,
    one pixel wide, as lmms-eval's `refcoco_bbox_doc_to_visual` shows it to the model."""
    bbox = row.get("bbox")
    if not isinstance(bbox, (list, tuple)) or len(bbox) != 4:
        raise DocError(f"field 'bbox' must hold 4 numbers (x, y, width, height), got {bbox!r}")
    if row.get("image") is None:
        raise DocError("missing image field 'image'", FailureKind.MISSING_IMAGE_FIELD)
    image = load_image(row["image"], None, "field 'image'")[0].image  # a converted copy: the row's stays unmarked
    x, y, width, height = bbox
    ImageDraw.Draw(image).rectangle([x, y, x + width, y + height], outline="red")
    return {"boxed_image": image}
