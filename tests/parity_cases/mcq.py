"""Parity fixtures of the multiple-choice benchmarks (rows from tests/test_tasks_mcq.py)."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from typing import Any

import test_tasks_mcq as t
from judge_fixtures import JudgeArgs, scripted_reply
from parity_case import ParityCase

from fastmmeval.parity import PeerTask

# A model that writes the role tag of its turn first: empty once cut at the stop string, "A" read whole.
ROLE_TAG_FIRST = {"101672": ["ASSISTANT: A"]}

# MMBench's judge: the scripted judge on both sides, failing on answers that hold OUTAGE (doc 1 gets one).
OUTAGE = "(judge outage)"
MMBENCH_JUDGE = JudgeArgs(fail_on=OUTAGE)
MMBENCH_EXTRA = {"1": [f"Hard to tell from here {OUTAGE}"]}
MMBENCH_EN_EXTRA = {**MMBENCH_EXTRA, "0": ["ASSISTANT: A"]}


def mmmu_six_rows() -> list[dict[str, Any]]:
    """MMMU's fixture and a sixth question: an accuracy in sixths has more decimals than lmms-eval keeps."""
    return [*t.mmmu_rows(), t.mmmu_row("validation_History_6", "<image 1> Which century is this map from?",
                                       "['16th', '17th', '18th', '19th']", "C", "multiple-choice", 1)]  # fmt: skip


def mmbench_peer(name: str, utils: str) -> Callable[[], PeerTask]:
    """lmms-eval's MMBench task `name`, its evaluator's GPT call answered by the scripted judge that
    grades our side (a failed call as its get_chat_response reports one once its retries are spent),
    and its results file (a side output of the aggregation) written nowhere."""

    def gpt(prompt: str, **settings: object) -> str:
        reply = scripted_reply(prompt, MMBENCH_JUDGE)
        return "Failed to obtain answer via API" if reply is None else reply

    def build() -> PeerTask:
        peer = PeerTask.load(name)
        evaluator = copy.copy(peer.module(utils).mmbench_evaluator)
        evaluator.get_chat_response = gpt
        peer.patches = {
            f"{utils}.mmbench_evaluator": evaluator,
            f"{utils}.generate_submission_file": lambda file_name, args: os.devnull,
        }
        return peer

    return build


def mmbench_case(name: str, utils: str, extra: dict[str, list[str]]) -> ParityCase:
    return ParityCase(name, t.mmbench_rows, t.MMBENCH, extra=extra, peer=mmbench_peer(name, utils), judge=MMBENCH_JUDGE)


CASES = [
    ParityCase("ai2d", t.ai2d_rows, t.AI2D),
    ParityCase("ai2d_lite", t.ai2d_rows, t.AI2D),
    ParityCase("scienceqa_img", t.scienceqa_rows, t.SCIENCEQA),
    ParityCase("seedbench", t.seedbench_rows, t.SEEDBENCH, extra=ROLE_TAG_FIRST),
    ParityCase("seedbench_lite", t.seedbench_rows, t.SEEDBENCH, extra=ROLE_TAG_FIRST),
    ParityCase("realworldqa", t.realworldqa_rows, t.REALWORLDQA),
    ParityCase("mmstar", t.mmstar_rows, t.MMSTAR),
    # Six docs and one more (wrong) answer for one: a slot of five right answers in six, past lmms-eval's rounding.
    ParityCase("mmmu_val", mmmu_six_rows, t.MMMU, extra={"validation_History_6": ["A"]}),
    ParityCase("cmmmu_val", t.cmmmu_rows, t.CMMMU, extra={"1": ["B"]}),
    # en stops at ASSISTANT: (doc 0's answer is A), cn at a blank line (the pool has those)
    *(mmbench_case(name, "en_utils", MMBENCH_EN_EXTRA) for name in ("mmbench_en_dev", "mmbench_en_dev_lite")),
    *(mmbench_case(name, "cn_utils", MMBENCH_EXTRA) for name in ("mmbench_cn_dev", "mmbench_cn_dev_lite")),
]
