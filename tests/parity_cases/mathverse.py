"""Parity fixtures of MathVerse testmini and its six problem-version sub-tasks (rows from
tests/test_tasks_mathverse.py). Both sides are graded by the scripted judge of parity_cases/judge.py:
ours through fastmmeval.judge, lmms-eval's through its MathVerseEvaluator's judge server, whose
`evaluate` that judge answers (lmms-eval's own binary prompt and reply reader around it)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import test_tasks_mathverse as t
from parity_case import ParityCase

from fastmmeval.parity import PeerTask
from parity_cases.judge import GARBLED, JUDGE, OUTAGE, ScriptedServer, placeholder_key


def mathverse_peer(name: str) -> Callable[[], PeerTask]:
    """lmms-eval's MathVerse task `name`, its evaluator's judge server asking the scripted judge (a
    failed call raises, as the real server does once its retries are spent)."""

    def build() -> PeerTask:
        peer = PeerTask.load(name)
        with placeholder_key():
            evaluator = copy.copy(peer.module("utils").mathverse_evaluator)
        evaluator.server = copy.copy(evaluator.server)
        evaluator.server.evaluate = ScriptedServer(evaluator.server).evaluate
        peer.patches = {"utils.mathverse_evaluator": evaluator}
        return peer

    return build


def extra(rows: list[dict[str, Any]], stop: str) -> dict[str, list[str]]:
    """Per doc, the right response followed by the task's stop string and more (right once cut,
    wrong read whole); the first doc's also right ones whose judge call fails and whose reply is
    unreadable (in slots where the other docs get the pool's first, right, answers)."""
    out = {r["sample_index"]: [f"{t.right(r)}\n{stop} That is all."] for r in rows}
    first = rows[0]
    out[first["sample_index"]] += [f"{t.right(first)} {OUTAGE}", f"{t.right(first)} {GARBLED}"]
    return out


def mathverse_case(task: str) -> ParityCase:
    features, rows = t.fixture(task)
    stop = "Q:" if task == "mathverse_testmini" else "ASSISTANT:"
    return ParityCase(task, lambda: t.fixture(task)[1], features, extra=extra(rows, stop), peer=mathverse_peer(task),
                      judge=JUDGE)  # fmt: skip


CASES = [mathverse_case(task) for task in t.TASKS]
