"""Parity with lmms-eval 0.7.3: the same responses scored by its code for a task and by ours, the
prompts compared, and every disagreement accounted for by a difference the task file lists.

The API: `check_task(task, ...)` returns a `ParityReport`; `response_pool` is the default set of
responses per doc; `PeerTask` is lmms-eval's side of one task; `EXPLAINERS` holds the check of each
difference id."""

from fastmmeval.parity import setups as _setups  # noqa: F401  (registers what lmms-eval tasks need here)
from fastmmeval.parity.differences import EXPLAINERS
from fastmmeval.parity.harness import ParityReport, check_task
from fastmmeval.parity.mismatch import Mismatch
from fastmmeval.parity.peer import PeerTask, PeerUnavailable, lmms_eval_module
from fastmmeval.parity.pool import response_pool
from fastmmeval.parity.report import report_lines

__all__ = [
    "EXPLAINERS", "Mismatch", "ParityReport", "PeerTask", "PeerUnavailable", "check_task", "lmms_eval_module",
    "report_lines", "response_pool",
]  # fmt: skip
