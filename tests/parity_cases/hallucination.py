"""Parity fixtures of the hallucination benchmarks (rows from tests/test_tasks_hallucination.py).
HallusionBench is graded on both sides by the scripted judge of parity_cases/judge.py."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import test_tasks_hallucination as t
from judge_fixtures import scripted_reply
from parity_case import ParityCase

from fastmmeval.parity import PeerTask
from fastmmeval.tasks.sources import DATA_DIR_ENV
from parity_cases.judge import JUDGE, NO_WAIT, OUTAGE

# A sentence on a yes label (doc 0), its slot's other yes docs answered right: a miss in our recall,
# left out of lmms-eval's.
POPE_SENTENCE = {"0": ["Yes, there is a snowboard."]}
# Otter's readings that lmms-eval's MME parser has (a lone y / n, periods dropped, yes or no up front).
MME_ANSWERS = {str(i): ["y", "N.", "no.", "Not at all.", "nope", "Yes, it is."] for i in range(len(t.MME_DOCS))}


def hallusion_answers() -> dict[str, list[str]]:
    """Per doc: right, wrong, right, right; doc 0's first one also breaks the judge (a failed call)
    and its third is wrong, so that its slot has 5 of 6 right (lmms-eval's rounding shows)."""
    extra = {}
    for i, (*_, label) in enumerate(t.HALLUSION_DOCS):
        right, wrong = (f"{t.yes_no(label, ok)}, according to the figure." for ok in (True, False))
        extra[str(i)] = [right, wrong, right, right]
    extra["0"][0] += f" {OUTAGE}"
    extra["0"][2] = extra["0"][1]
    return extra


class _Reply:
    """A reply of the HTTP call lmms-eval's evaluate_by_chatgpt makes; a failed judge call is an HTTP error."""

    def __init__(self, text: str | None) -> None:
        self.text = text

    def raise_for_status(self) -> None:
        if self.text is None:
            raise RuntimeError("500 Server Error: scripted judge failure")

    def json(self) -> dict[str, Any]:
        return {"choices": [{"message": {"content": self.text}}]}


def hallusion_peer() -> PeerTask:
    """lmms-eval's hallusion_bench_image, its GPT-4 call (requests.post) answered by the scripted
    judge, its retries without their waits, and a run folder for the judgments file it writes.
    Each scoring is a run of its own: the file of an earlier one is not read back (load_json)."""
    peer = PeerTask.load("hallusion_bench_image")
    evaluate_by_chatgpt = peer.module("utils").evaluate_by_chatgpt

    def fresh(data: list[dict], output_entry: str, correctness_entry: str, **kwargs: Any) -> list[dict]:
        return evaluate_by_chatgpt(data, output_entry, correctness_entry, **{**kwargs, "load_json": False})

    def post(url: str, headers: Any = None, json: Any = None, timeout: float = 0) -> _Reply:
        return _Reply(scripted_reply(json["messages"][0]["content"], JUDGE))

    peer.patches = {"utils.requests": SimpleNamespace(post=post), "utils.time": NO_WAIT,
                    "evaluate_hb.evaluate_by_chatgpt": fresh}  # fmt: skip
    peer.run_args = SimpleNamespace(output_path=os.environ[DATA_DIR_ENV])
    return peer


CASES = [
    ParityCase("pope", t.pope_rows, t.POPE, extra=POPE_SENTENCE),
    ParityCase("pope_adv", t.pope_rows, t.POPE, extra=POPE_SENTENCE),
    ParityCase("pope_pop", t.pope_rows, t.POPE, extra=POPE_SENTENCE),
    ParityCase("pope_random", t.pope_rows, t.POPE, extra=POPE_SENTENCE),
    ParityCase("mme", t.mme_rows, t.MME, extra=MME_ANSWERS),
    ParityCase("hallusion_bench_image", t.hallusion_rows, t.HALLUSION, extra=hallusion_answers(), peer=hallusion_peer,
               judge=JUDGE),
]  # fmt: skip
