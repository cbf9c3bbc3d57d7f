"""Parity fixtures of the captioning benchmarks (rows from tests/test_tasks_caption.py).

lmms-eval scores a caption task with pycocoevalcap, each aggregation of each metric running
PTBTokenizer (a Java process) twice and starting a METEOR jar: some 20 Java starts per scoring.
Its side runs here with two stand-ins that keep its numbers and cut the starts: PTBTokenizer runs
once per distinct caption (it tokenizes each line on its own: `-preserveLines`), and METEOR is one
process (the jar scores each segment on its own), the one our METEOR uses."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from parity_case import ParityCase
from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer
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

from fastmmeval.metrics.caption import meteor_scorer
from fastmmeval.parity import PeerTask

# Each case is seven pycocoevalcap aggregations on lmms-eval's side: three docs keep the check short.
DOCS = 3
_TOKENS: dict[str, str] = {}  # caption -> PTBTokenizer's tokens of it, over the whole session


class LinePTBTokenizer:
    """pycocoevalcap's PTBTokenizer, run only on the captions it has not tokenized yet (all of them
    in one Java call); a caption that is more than one line to Java is never cached: then the
    whole input goes to PTBTokenizer as it is."""

    def tokenize(self, captions_for_image: Mapping[Any, Sequence[Mapping[str, str]]]) -> dict[Any, list[str]]:
        """{image id: [tokens of each caption]}, as PTBTokenizer.tokenize."""
        texts = [c["caption"] for cs in captions_for_image.values() for c in cs]
        if any(len(t.replace("\n", " ").splitlines()) > 1 for t in texts):
            return PTBTokenizer().tokenize(captions_for_image)
        missing = list(dict.fromkeys(t for t in texts if t not in _TOKENS))
        if missing:
            tokens = PTBTokenizer().tokenize({i: [{"caption": t}] for i, t in enumerate(missing)})
            _TOKENS.update((t, tokens[i][0]) for i, t in enumerate(missing))
        return {k: [_TOKENS[c["caption"]] for c in cs] for k, cs in captions_for_image.items()}


def caption_peer(task: str) -> Callable[[], PeerTask]:
    """lmms-eval's `task` with the stand-ins."""

    def load() -> PeerTask:
        peer = PeerTask.load(task)
        peer.patches |= {"utils.PTBTokenizer": LinePTBTokenizer, "utils.Meteor": meteor_scorer}
        return peer

    return load


# The first doc's first reference with tag-like words, each one token to PTBTokenizer, several to ours.
TAGGED = "An astronaut in a <b>white</b> suit poses in front of an American flag."
REGION_TAGGED = "woman in the <b>white</b> spacesuit"
# A region caption that goes on past the role tag refcoco's `until` names: stop_string.
REGION_ROLE_TAG = "woman in the white spacesuit ASSISTANT: an astronaut on the left"


def _case(task: str, rows: Callable[[], list[dict[str, Any]]], features: Any) -> ParityCase:
    """The task on its first DOCS rows, lmms-eval's side with the stand-ins, and the responses that
    show its listed differences added for its first doc."""
    region = task.startswith("refcoco")
    id_field = task_config(task).doc_id
    first_id = str(rows()[0][id_field]) if id_field else "0"
    return ParityCase(
        task,
        lambda: rows()[:DOCS],
        features,
        extra={first_id: [REGION_TAGGED, REGION_ROLE_TAG] if region else [TAGGED]},
        peer=caption_peer(task),
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
