"""Explainers of the captioning benchmarks' differences (`tasks/builtin/caption/`), shared with
ScreenSpot's region captions (`screenspot_reg_test`), which pycocoevalcap scores the same way."""

from __future__ import annotations

from fastmmeval.engine.sampling import cut_at_stop
from fastmmeval.metrics.ptb_tokenize import tokenize
from fastmmeval.parity.differences import EXPLAINERS
from fastmmeval.parity.mismatch import Mismatch, same_value
from fastmmeval.tasks.task import Task


@EXPLAINERS.register("ptb_tokenizer")
def ptb_tokenizer(m: Mismatch, task: Task) -> bool:
    """Captions are tokenized by our pure-Python PTB-style tokenizer; lmms-eval's by PTBTokenizer
    (Java): lmms-eval given each response as we score it (cut at our stop strings) still differs,
    and given our tokens of it gives our value."""
    if m.kind not in ("score", "aggregate") or m.theirs_with is None:
        return False
    stops = task.config.generation.stop

    def as_scored(response: str) -> str:
        cut = cut_at_stop(response, stops) if stops else None
        return (response if cut is None else cut).strip()

    if same_value(m.theirs_with(as_scored), m.ours):
        return False  # the stop string (or the surrounding whitespace) explains it, not the tokenizer
    return same_value(m.theirs_with(lambda r: tokenize(as_scored(r))), m.ours)
