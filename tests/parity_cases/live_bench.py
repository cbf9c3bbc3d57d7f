"""Parity fixtures of LiveBench's hub months (rows from tests/test_tasks_live_bench.py). Both sides are
graded by tests/judge_fixtures.py's scripted judge, which needs the screenshots: ours through
fastmmeval.judge, lmms-eval's through its OpenAI client (utils_v2's module-wide one, or the one utils.py
makes per call). Doc 0's extra responses make the judge reply with a string Rating, a fenced reply and
a Rating of 12; a failed call and a reply without JSON are left out on both sides (no difference)."""

from __future__ import annotations

import test_tasks_live_bench as t
from judge_fixtures import JudgeArgs
from parity_case import ParityCase

from fastmmeval.parity import PeerTask
from parity_cases.judge import placeholder_key

JUDGE = JudgeArgs(fail_on=t.OUTAGE, garbage_on=t.GARBLED)
ANSWER = t.DOCS[0][1]
DOC_0 = [f'{ANSWER} (rate "7")', f"{ANSWER} (fenced)", f"{ANSWER} (rate 12)", f"{ANSWER} {t.OUTAGE}",
         f"{ANSWER} {t.GARBLED}"]  # fmt: skip


def month(task: str) -> ParityCase:
    """A hub month's case: its lmms-eval task asking the scripted judge, ours graded by the same judge."""
    module, subtasks = t.MONTHS[task]

    def peer() -> PeerTask:
        lmms = PeerTask.load(task)
        with placeholder_key():
            lmms.module(module)
        lmms.patches = t.peer_patches(module, t.ScriptedOpenAI(JUDGE))
        return lmms

    return ParityCase(task, lambda: t.live_bench_rows(subtasks), t.LIVE_BENCH, extra={"0": DOC_0}, peer=peer,
                      judge=JUDGE)  # fmt: skip


CASES = [month(task) for task in t.MONTHS]
