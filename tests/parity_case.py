"""What a benchmark's parity test needs: its fixture rows in the hub schema and, per doc, the
responses beyond the generic pool that show a listed difference (see tests/test_parity.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
from judge_fixtures import JudgeArgs

from fastmmeval.parity import PeerTask


@dataclass(frozen=True)
class ParityCase:
    """One task's parity fixture. `extra` maps a doc id to responses added to its pool; `peer`
    builds lmms-eval's side when it needs patches (e.g. a scripted stand-in for its GPT calls)."""

    task: str
    rows: Callable[[], list[dict[str, Any]]]
    features: datasets.Features
    extra: Mapping[str, Sequence[str]] = field(default_factory=dict)
    peer: Callable[[], PeerTask] | None = None
    judge: JudgeArgs | None = None  # our side's scripted judge (tests/judge_fixtures.py), where the task needs one
    save_more: Callable[[Path], None] | None = None  # saves other data the task reads (e.g. an image config)
