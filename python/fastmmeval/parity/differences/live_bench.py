"""Explainers of LiveBench's own differences: lmms-eval's reading of a judge reply (json.loads of the
whole reply, its Rating taken as it is) put back over our judge's raw replies. A rating out of range
is `unreadable_judgments` (differences/judged.py)."""

from __future__ import annotations

import json
from typing import Any

from fastmmeval.parity.differences import EXPLAINERS
from fastmmeval.parity.mismatch import Mismatch, same_value
from fastmmeval.parity.peer import PeerFailure
from fastmmeval.tasks.task import Task

_DROPPED = -1  # lmms-eval's rating of a failed or unreadable judgment, left out of its aggregation


def _peer_rating(sample: dict[str, Any]) -> Any:
    """The rating lmms-eval's livebench_process_results keeps for our sample's response and our
    judge's raw reply: 0 for an empty response (its judge is not asked), -1 for a failed call or a
    reply json.loads cannot read (or without Explanation and Rating), else the Rating as it is."""
    if not str(sample.get("extracted") or "").strip():
        return 0
    [record] = [next(iter(by_judge.values())) for by_judge in sample.get("judgments", {}).values()]
    try:
        reply = json.loads(record["raw"])
        return reply["Rating"] if "Explanation" in reply else _DROPPED
    except Exception:  # lmms-eval's get_chat_response catches everything into -1
        return _DROPPED


def _peer_score(m: Mismatch) -> Any:
    """lmms-eval's gpt4_eval_score over our samples with its reading of the replies: a float, or the
    name of the exception its process_results (a Rating that is no number compared with 0) or its
    aggregation (no rating left: a division by zero) raises."""
    ratings = [_peer_rating(s) for s in m.ours_samples]
    if any(not isinstance(r, (int, float)) for r in ratings):
        return "TypeError"
    kept = [r for r in ratings if r >= 0]
    return sum(r / 10 for r in kept) / len(kept) * 100 if kept else "ZeroDivisionError"


def _reads_as_lmms_eval(m: Mismatch) -> bool:
    """Whether lmms-eval's value is what its reading of our judge's replies gives."""
    peer = _peer_score(m)
    if isinstance(peer, str):
        return isinstance(m.theirs, PeerFailure) and f": {peer}: " in m.theirs.error
    return same_value(peer, m.theirs)


def _raw_replies(m: Mismatch) -> list[str]:
    return [r["raw"] for s in m.ours_samples for by_judge in s.get("judgments", {}).values()
            if (r := next(iter(by_judge.values())))["raw"] is not None]  # fmt: skip


def _loads(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


@EXPLAINERS.register("string_rating")
def string_rating(m: Mismatch, task: Task) -> bool:
    """LiveBench: a Rating given as a string reads as its number here; lmms-eval's process_results
    raises TypeError on it."""
    shown = any(isinstance(r, dict) and isinstance(r.get("Rating"), str) for r in map(_loads, _raw_replies(m)))
    return m.kind in ("score", "aggregate") and shown and _reads_as_lmms_eval(m)


@EXPLAINERS.register("repaired_reply")
def repaired_reply(m: Mismatch, task: Task) -> bool:
    """LiveBench: a reply whose JSON object is fenced or in prose is read here; json.loads fails on it
    in lmms-eval, which leaves the doc out (rating -1)."""
    shown = any(_loads(raw) is None and "{" in raw for raw in _raw_replies(m))
    return m.kind in ("score", "aggregate") and shown and _reads_as_lmms_eval(m)
