"""Explainers of the MMMU differences (`tasks/families/mmmu.py`)."""

from __future__ import annotations

import re

from fastmmeval.parity.differences import EXPLAINERS
from fastmmeval.parity.mismatch import Mismatch
from fastmmeval.tasks.families.mmmu import MMMU_MC_PROMPT, MMMU_OPEN_PROMPT, mmmu_open_readings
from fastmmeval.tasks.task import Task

Parts = list[tuple[str, str]]
_IMAGE_TAG = re.compile(r"<image \d+>")


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


@EXPLAINERS.register("mmmu_test_prompt")
def mmmu_test_prompt(m: Mismatch, task: Task) -> bool:
    """mmmu_test asks with mmmu_val's prompt (images in place of their tags, the instruction last);
    lmms-eval's mmmu_test, without kwargs or doc_to_messages, gets its images first, then the text
    with its tags and no instruction. Ours without the instruction and with each tag for an image is
    its text, word for word, over the same images."""
    if m.kind != "prompt" or not m.theirs or m.theirs[-1][0] != "text":
        return False
    *images, (_, text) = m.theirs
    if any(kind != "image" for kind, _ in images) or {v for _, v in images} != {v for k, v in m.ours if k == "image"}:
        return False
    ours = " ".join(value for kind, value in m.ours if kind == "text")
    instruction = next((i for i in (MMMU_MC_PROMPT, MMMU_OPEN_PROMPT) if ours.endswith(i)), None)
    return instruction is not None and ours.removesuffix(instruction).split() == _IMAGE_TAG.sub(" ", text).split()


@EXPLAINERS.register("open_answer_first_reading")
def open_answer_first_reading(m: Mismatch, task: Task) -> bool:
    """An open question's submitted answer (its `{id: answer}` entry) is the first of MMMU's readings of
    the response in the order read; lmms-eval's is the first in a set's order: another of them."""
    if m.key != "submission" or len(m.responses) != 1 or not isinstance(m.ours, dict) or not isinstance(m.theirs, dict):
        return False
    readings = [str(r) for r in mmmu_open_readings(m.responses[0])]
    return m.ours.keys() == m.theirs.keys() and list(m.ours.values()) == readings[:1] and all(
        v in readings for v in m.theirs.values()
    )
