"""Parity fixtures of the judged benchmarks (rows from tests/test_tasks_judge.py). Both sides are
graded by tests/judge_fixtures.py's scripted judge: ours through fastmmeval.judge, lmms-eval's with
its judge server (or HTTP call) answered by the same judge, so a prompt both build alike gets the
same reply. The judge fails on answers that hold OUTAGE and replies nonsense to those that hold
GARBLED (where its prompt has that case), one extra response each."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import test_tasks_judge as t
from judge_fixtures import JudgeArgs, scripted_reply
from parity_case import ParityCase

from fastmmeval.parity import PeerTask, lmms_eval_module

OUTAGE = "(judge outage)"
GARBLED = "(judge garbles)"
JUDGE = JudgeArgs(fail_on=OUTAGE, garbage_on=GARBLED)
NO_WAIT = SimpleNamespace(sleep=lambda seconds: None)  # lmms-eval's `time` where it waits between retries


class ScriptedServer:
    """lmms-eval's judge server (`lmms_eval.llm_judge`) answering with the scripted judge; a failed
    call raises, as the real server does once its retries are spent."""

    def __init__(self, server: Any) -> None:
        self.config = server.config

    def evaluate(self, request: Any) -> Any:
        """The reply to the request's (one) user message."""
        reply = scripted_reply(request.messages[-1]["content"], JUDGE)
        if reply is None:
            raise RuntimeError("scripted judge failure")
        return lmms_eval_module("llm_judge.protocol").Response(content=reply.strip(), model_used="scripted")


@contextmanager
def placeholder_key() -> Iterator[None]:
    """An OpenAI key in the environment where none is set: lmms-eval builds its judge clients on
    import (or on first use), and refuses without one; they are never called here."""
    saved = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = saved or "unused-by-the-parity-check"
    try:
        yield
    finally:
        if saved is None:
            del os.environ["OPENAI_API_KEY"]


def mmvet_peer() -> PeerTask:
    """lmms-eval's mmvet, its get_chat_response asking the scripted judge (so a failed call gives
    its "" and an unreadable reply its retries, without their waits)."""
    peer = PeerTask.load("mmvet")
    with placeholder_key():
        utils = peer.module("utils")
    peer.patches = {"utils.server": ScriptedServer(utils.server), "utils.time": NO_WAIT}
    return peer


def llava_peer() -> PeerTask:
    """lmms-eval's llava_in_the_wild, its verification pipeline (OpenAIVerifier with lmms-eval's
    own prompt passing and score parser) asking the scripted judge."""
    peer = PeerTask.load("llava_in_the_wild")
    with placeholder_key():
        pipeline = copy.copy(peer.module("utils")._get_pipeline())
    pipeline.verifier = copy.copy(pipeline.verifier)
    pipeline.verifier._server = ScriptedServer(pipeline.verifier._server)
    peer.patches = {"utils._pipeline": pipeline}
    return peer


def mathvista_peer() -> PeerTask:
    """lmms-eval's mathvista_testmini_format, its evaluator's judge server the scripted judge."""
    peer = PeerTask.load("mathvista_testmini_format")
    with placeholder_key():
        evaluator = copy.copy(peer.module("utils").mathvista_evaluator)
    evaluator.server = ScriptedServer(evaluator.server)
    peer.patches = {"utils.mathvista_evaluator": evaluator}
    return peer


def judged(task: str, rows: Callable[[], list[dict]], features: Any, peer: Callable[[], PeerTask],
           extra: dict[str, list[str]]) -> ParityCase:  # fmt: skip
    """A judged task's case: lmms-eval's side from `peer`, ours graded by the same scripted judge."""
    return ParityCase(task, rows, features, extra=extra, peer=peer, judge=JUDGE)


def mathvista_rows() -> list[dict[str, Any]]:
    """MathVista's fixture, a copy of its counting question (seven questions in all: shares that
    lmms-eval's rounding to 2 decimals changes) and a choice question whose answer is its shortest
    choice (the one lmms-eval takes for an empty response)."""
    rows = t.mathvista_rows()
    shortest = {**rows[0], "pid": "7", "question": "Which solid is shown?", "choices": ["cube", "sphere", "cylinder"],
                "answer": "cube", "query": "Question: Which solid is shown?"}  # fmt: skip
    return [*rows, {**rows[1], "pid": "6"}, shortest]


# LLaVA-W's doc 0 in the slots after the pool (the other docs answered right, wrong, wrong, right):
# a wrong answer (the relative score of all rounds), a reply without ratings, a failed call, and the
# reference followed by the next turn (right once cut at ASSISTANT:, wrong read whole).
LLAVA_W_DOC_0 = ["A suit.", f"A suit. {GARBLED}", f"A suit. {OUTAGE}",
                 f"{t.LLAVA_W_DOCS[0][1]}\nASSISTANT: Is there anything else?"]  # fmt: skip
# MathVista: a slot with the float questions answered wrong and the rest right (only the rounding
# differs), then a failed call.
MATHVISTA_EXTRA = {"1": ["square"], "2": ["3", f"It is 3 {OUTAGE}"], "3": ["2.4"], "4": ["0.7"]}

CASES = [
    judged("mmvet", t.mmvet_rows, t.MMVET, mmvet_peer, {"v1_0": [f"a helmet {OUTAGE}", f"a helmet {GARBLED}"]}),
    judged("llava_in_the_wild", t.llava_w_rows, t.LLAVA_W, llava_peer, {"0": LLAVA_W_DOC_0}),
    judged("mathvista_testmini", mathvista_rows, t.MATHVISTA, mathvista_peer, MATHVISTA_EXTRA),
]
