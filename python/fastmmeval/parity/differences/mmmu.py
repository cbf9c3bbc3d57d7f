"""Explainers of the MMMU differences (`tasks/families/mmmu.py`)."""

from __future__ import annotations

from fastmmeval.parity.differences import EXPLAINERS
from fastmmeval.parity.harness import Mismatch
from fastmmeval.tasks.task import Task

Parts = list[tuple[str, str]]


@EXPLAINERS.register("mmmu_image_order")
def mmmu_image_order(m: Mismatch, task: Task) -> bool:
    """Each `<image N>` tag shows image N here; lmms-eval's mmmu_doc_to_messages puts the named
    images, each once in number order, at the first tags and drops the text between the last of
    those tags and the last tag. Its images (in its order, the number order) placed so in our
    prompt give its prompt."""
    if m.kind != "prompt":
        return False
    ours, theirs = list(m.ours), list(m.theirs)
    named = [value for kind, value in theirs if kind == "image"]
    if len(set(named)) != len(named) or set(named) != {value for kind, value in ours if kind == "image"}:
        return False
    return _placed_in_turn(ours, named) == theirs


def _placed_in_turn(parts: Parts, images: list[str]) -> Parts:
    """`parts` with `images` put at its first image positions, one each, and the text between the
    last of those and the last image position dropped (empty texts left out)."""
    texts = [""]  # the text before each image position, then the text after the last
    for kind, value in parts:
        if kind == "image":
            texts.append("")
        else:
            texts[-1] += value
    out: Parts = []
    for text, image in zip(texts, images, strict=False):
        out += [("text", text)] if text else []
        out.append(("image", image))
    return out + ([("text", texts[-1])] if texts[-1] else [])
