"""Thumbnails for the HTML report: the images of the top examples that overlap by image, and the training images
whose ids they name, so that an auditor sees both sides of each image match."""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from typing import Any

from PIL import Image

from fastmmeval.contam.readers.image_tokens import as_rgb
from fastmmeval.contam.readers.shards import RecordSource
from fastmmeval.errors import DocError
from fastmmeval.protocol import ImagePart
from fastmmeval.tasks.task import Task

SIDE = 160  # a thumbnail's longer side, in pixels


def data_uri(image: Image.Image) -> str:
    """A JPEG thumbnail of the image as a data: URI."""
    thumb = as_rgb(image).copy()
    thumb.thumbnail((SIDE, SIDE))
    buf = io.BytesIO()
    thumb.save(buf, format="JPEG", quality=80)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _image_examples(report: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(task name, example) of every top example that overlaps by image."""
    return [
        (name, e)
        for name, t in report["tasks"].items()
        for e in t["top_examples"]
        if e["image"].get("overlapping_images")
    ]


def collect(report: dict[str, Any], tasks: Sequence[Task], corpus: Sequence[Any] | None) -> dict[str, Any]:
    """Thumbnails of the report's top image matches: {"benchmark": {task: {doc id: [uri]}}, "training": {training
    id: [uri]}} (training images only from record shards of the corpus, read again for those ids)."""
    examples = _image_examples(report)
    by_name = {t.name: t for t in tasks}
    refs = {name: {r.id: r for r in by_name[name].doc_refs()} for name in {name for name, _ in examples}}
    bench: dict[str, dict[str, list[str]]] = {}
    for name, e in examples:
        task, ref = by_name[name], refs[name].get(e["doc_id"])
        if ref is None:
            continue
        try:
            messages = task.request(task.doc(ref), 0).messages
        except DocError:
            continue
        parts = [p for m in messages for p in m.content if isinstance(p, ImagePart)]
        bench.setdefault(name, {})[e["doc_id"]] = [data_uri(p.image) for p in parts]
    wanted = {i for _, e in examples for i in e["image"].get("training_ids", [])}
    training: dict[str, list[str]] = {}
    for source in corpus or []:
        if not isinstance(source, RecordSource) or not wanted - training.keys():
            continue
        for training_id, images in source.images_of(wanted - training.keys()).items():
            training[training_id] = [data_uri(im) for im in images]
    return {"benchmark": bench, "training": training}
