"""Parity fixtures of the captioning benchmarks (rows from tests/test_tasks_caption.py).

lmms-eval's side runs with the stand-ins PeerTask.load adds for captioning (fastmmeval.parity.setups:
PTBTokenizer once per distinct caption, one METEOR process), which keep its numbers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from parity_case import ParityCase
from task_fixtures import task_config
from test_tasks_caption import (
    COCO_FEATURES,
    FLICKR_FEATURES,
    NOCAPS_FEATURES,
    REFCOCO_FEATURES,
    TEXTCAPS_FEATURES,
    _coco_rows,
    _flickr_rows,
    _nocaps_rows,
    _refcoco_rows,
    _textcaps_rows,
)

# Each case is seven pycocoevalcap aggregations on lmms-eval's side: three docs keep the check short.
DOCS = 3

# The first doc's first reference with tag-like words, each one token to PTBTokenizer, several to ours.
TAGGED = "An astronaut in a <b>white</b> suit poses in front of an American flag."
REGION_TAGGED = "woman in the <b>white</b> spacesuit"
# A region caption that goes on past the role tag refcoco's `until` names: stop_string.
REGION_ROLE_TAG = "woman in the white spacesuit ASSISTANT: an astronaut on the left"


def _case(task: str, rows: Callable[[], list[dict[str, Any]]], features: Any) -> ParityCase:
    """The task on its first DOCS rows, with the responses that show its listed differences added
    for its first doc."""
    region = task.startswith("refcoco")
    id_field = task_config(task).doc_id
    first_id = str(rows()[0][id_field]) if id_field else "0"
    return ParityCase(
        task,
        lambda: rows()[:DOCS],
        features,
        extra={first_id: [REGION_TAGGED, REGION_ROLE_TAG] if region else [TAGGED]},
    )


CASES = [
    _case("coco2014_cap_val", lambda: _coco_rows(2014), COCO_FEATURES),
    _case("coco2017_cap_val", lambda: _coco_rows(2017), COCO_FEATURES),
    _case("coco2017_cap_val_lite", lambda: _coco_rows(2017), COCO_FEATURES),
    _case("flickr30k_test", _flickr_rows, FLICKR_FEATURES),
    _case("flickr30k_test_lite", _flickr_rows, FLICKR_FEATURES),
    _case("nocaps_val", _nocaps_rows, NOCAPS_FEATURES),
    _case("nocaps_val_lite", _nocaps_rows, NOCAPS_FEATURES),
    _case("textcaps_val", _textcaps_rows, TEXTCAPS_FEATURES),
    _case("textcaps_val_lite", _textcaps_rows, TEXTCAPS_FEATURES),
    _case("refcoco_bbox_val", _refcoco_rows, REFCOCO_FEATURES),
    _case("refcoco_bbox_val_lite", _refcoco_rows, REFCOCO_FEATURES),
    _case("refcoco+_bbox_val", _refcoco_rows, REFCOCO_FEATURES),
    _case("refcocog_bbox_val", _refcoco_rows, REFCOCO_FEATURES),
]
