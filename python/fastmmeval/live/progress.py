"""Counts and progress bars per stage of a pipeline (live build, evolve run), updated from any thread."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence

from tqdm import tqdm


class StageProgress:
    """Per stage: how many inputs it was given (`in`), finished (`out`) and failed, with one tqdm bar
    each (hidden unless `show`)."""

    def __init__(self, stages: Sequence[str], show: bool, unit: str = "call") -> None:
        width = max(len(s) for s in stages)
        self.counts: dict[str, Counter[str]] = {s: Counter() for s in stages}
        self.bars = {s: tqdm(total=0, desc=f"{s:<{width}}", unit=unit, position=i, disable=not show, leave=True)
                     for i, s in enumerate(stages)}
        self._lock = threading.Lock()

    def expect(self, stage: str, n: int = 1) -> None:
        """`n` more inputs for `stage`."""
        with self._lock:
            self.counts[stage]["in"] += n
            bar = self.bars[stage]
            bar.total += n
            bar.refresh()

    def done(self, stage: str, ok: bool, n: int = 1) -> None:
        """`n` inputs of `stage` finished, or failed."""
        with self._lock:
            self.counts[stage]["out" if ok else "failed"] += n
            self.bars[stage].update(n)

    def add(self, stage: str, key: str, n: int = 1) -> None:
        """Count `n` under another `key` of `stage` (e.g. accepted, rejected)."""
        with self._lock:
            self.counts[stage][key] += n

    def close(self) -> None:
        """Close every bar."""
        for bar in self.bars.values():
            bar.close()
