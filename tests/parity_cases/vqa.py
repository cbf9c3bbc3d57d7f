"""Parity fixtures of the VQA benchmarks (rows from tests/test_tasks_vqa.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import datasets
from parity_case import ParityCase
from test_tasks_vqa import (
    GQA,
    GQA_IMAGE_FEATURES,
    GQA_IMAGES,
    GQA_IMAGES_SPLIT,
    OK_VQA,
    TEXTVQA,
    VIZWIZ,
    VQAV2,
    gqa_row,
    photo,
    vqav2_row,
)

from fastmmeval.tasks.sources import saved_split_dir


def gqa_rows() -> list[dict[str, Any]]:
    """GQA's fixture plus a one-letter answer, where lmms-eval's numpy lower-casing of 'İ' shows."""
    return [*GQA.rows(), gqa_row("7654321", "n5", "Which letter is on the sign?", "i")]


def gqa_images(data_dir: Path) -> None:
    """GQA's image config, where the task and lmms-eval's process_docs look images up by imageId."""
    images = [{"id": image_id, "image": photo(i)} for i, image_id in enumerate(["n161313", "n235859", "n99", "n5"])]
    out = saved_split_dir(data_dir, GQA_IMAGES, GQA_IMAGES_SPLIT)
    datasets.Dataset.from_list(images, features=GQA_IMAGE_FEATURES).save_to_disk(str(out))


def vqav2_rows() -> list[dict[str, Any]]:
    """VQAv2's fixture plus a number with a thousands comma, where lmms-eval's comma rule shows."""
    return [*VQAV2.rows(), vqav2_row(5, "How many people are in the stadium?", ["1000"] * 10, 5)]


CASES = [
    ParityCase("gqa", gqa_rows, GQA.features, extra={"7654321": ["İ"]}, save_more=gqa_images),
    ParityCase("vqav2_val", vqav2_rows, VQAV2.features, extra={"5": ["1,,000"]}),
    ParityCase("ok_vqa_val2014", OK_VQA.rows, OK_VQA.features),
    ParityCase("vizwiz_vqa_val", VIZWIZ.rows, VIZWIZ.features),
    ParityCase("textvqa_val", TEXTVQA.rows, TEXTVQA.features),
]  # fmt: skip
