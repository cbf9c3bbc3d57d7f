"""Kill -9 at seeded random moments: a child command is killed N times, restarted each time with its
flow's resume command, then left to finish; its outputs are then compared with an uninterrupted run's.

A child reports progress through a callable (sample lines written, say). A moment either waits for the
progress to reach a target and kills `delay_s` later (a kill in the middle of the work), or kills `delay_s`
after the child started (imports, model load, reading back what was done). Targets are drawn in [1, work)
and sorted, so the kills walk through the work. `KILL_POINTS` (env `FASTMMEVAL_KILL_POINTS`, default 10)
is the number of kills per flow, `KILL_SEED` (env `FASTMMEVAL_KILL_SEED`, default 0) fixes the draw.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

KILL_POINTS = int(os.environ.get("FASTMMEVAL_KILL_POINTS", "10"))
KILL_SEED = int(os.environ.get("FASTMMEVAL_KILL_SEED", "0"))
# The fewest kills (or kills mid-work) a flow must land: on a busy machine a child may end before its moment.
ENOUGH_KILLS = max(1, KILL_POINTS // 3)
CLI = (sys.executable, "-m", "fastmmeval.cli")
POLL_S = 0.005

Progress = Callable[[], int]


@dataclass(frozen=True)
class Moment:
    """Kill `delay_s` seconds after the child's progress first reaches `after` (0: after its start)."""

    after: int
    delay_s: float


def draw_moments(seed: int, kills: int, *, start_s: float, work: int = 0, max_delay_s: float = 0.0) -> list[Moment]:
    """`kills` moments, reproducible from `seed`. With `work` units of progress, about half of them kill mid-work
    (targets in [1, work) in increasing order, delays below `max_delay_s`); the others, and all of them without
    `work`, kill within the first `start_s` seconds of a child."""
    rng = random.Random(seed)
    in_work = [work > 1 and rng.random() < 0.5 for _ in range(kills)]
    targets = iter(sorted(rng.randrange(1, work) for _ in range(sum(in_work))))
    return [
        Moment(next(targets), rng.uniform(0.0, max_delay_s)) if mid else Moment(0, rng.uniform(0.0, start_s))
        for mid in in_work
    ]


@dataclass(frozen=True)
class Outcome:
    """One child: its exit status (-9 when killed), the progress seen at its end, its seconds to its first
    progress (None: it made none) and to its end, and its stderr."""

    returncode: int
    progress: int
    first_progress_s: float | None
    seconds: float
    stderr: str

    def line(self) -> str:
        """A one-line summary for assertion messages."""
        return f"rc {self.returncode} at progress {self.progress} after {self.seconds:.2f} s: {self.stderr[-800:]!r}"


class Child:
    """A child command's process with its stderr in `log`, watched through `progress`."""

    def __init__(self, command: Sequence[str], progress: Progress, log: Path, env: dict[str, str]) -> None:
        self.progress, self.log = progress, log
        self.began = time.monotonic()
        self.first: float | None = None
        with log.open("wb") as err:
            self.proc = subprocess.Popen(list(command), stdout=subprocess.DEVNULL, stderr=err, env=env)

    def wait_until(self, ready: Callable[[], bool], deadline: float) -> None:
        """Poll until `ready()` or the child's end."""
        while self.proc.poll() is None and not ready():
            if self.first is None and self.progress() > 0:
                self.first = time.monotonic() - self.began
            if time.monotonic() > deadline:
                self.proc.kill()
                raise TimeoutError(f"child {self.proc.args} did not get there in time")
            time.sleep(POLL_S)

    def kill_at(self, moment: Moment, deadline: float) -> Outcome:
        """SIGKILL at `moment`, unless the child ends first."""
        self.wait_until(lambda: self.progress() >= moment.after, deadline)
        reached = time.monotonic()
        self.wait_until(lambda: time.monotonic() - reached >= moment.delay_s, deadline)
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        return self.finish(deadline)

    def finish(self, deadline: float) -> Outcome:
        """Wait for the child's end."""
        self.wait_until(lambda: False, deadline)
        self.proc.wait()
        seconds, progress = time.monotonic() - self.began, self.progress()
        first = seconds if self.first is None and progress > 0 else self.first  # it made progress between polls
        return Outcome(self.proc.returncode, progress, first, seconds, self.log.read_text(errors="replace"))


def run_timed(command: Sequence[str], progress: Progress, logs: Path, env: dict[str, str] | None = None) -> Outcome:
    """Run `command` uninterrupted to its end; it must exit 0."""
    logs.mkdir(parents=True, exist_ok=True)
    outcome = Child(command, progress, logs / "uninterrupted.err", {**os.environ, **(env or {})}).finish(
        time.monotonic() + 300
    )
    assert outcome.returncode == 0, f"uninterrupted run: {outcome.line()}"
    return outcome


@dataclass
class Chain:
    """Every child of a kill chain, in order, and how many of the moments it was given it used (fewer when the
    work was complete before the last)."""

    children: list[Outcome] = field(default_factory=list)
    used: int = 0

    @property
    def kills(self) -> int:
        """How many children were killed."""
        return sum(c.returncode == -signal.SIGKILL for c in self.children)

    def mid_work(self, work: int) -> int:
        """How many children were killed with some but not all of the `work` done."""
        return sum(c.returncode == -signal.SIGKILL and 0 < c.progress < work for c in self.children)

    def describe(self) -> str:
        """One line per child."""
        return "\n".join(f"child {i}: {c.line()}" for i, c in enumerate(self.children))


def kill_and_resume(
    start: Sequence[str],
    resume: Callable[[], Sequence[str] | None],
    moments: Sequence[Moment],
    progress: Progress,
    logs: Path,
    env: dict[str, str] | None = None,
    timeout_s: float = 300.0,
) -> Chain:
    """Run `start` and SIGKILL it at the first moment, then `resume()` killed at the next, and so on; then run
    the last `resume()` to its end. `resume()` is asked after each child: None means the work is complete and
    nothing is left to resume (the chain ends there, the moments left unused). A child that ends before its
    kill must exit 0, as must the last one. Each child's stderr goes to `logs`/<i>.err (and <i>.err of an
    earlier chain in the same folder is overwritten)."""
    env = {**os.environ, **(env or {})}
    logs.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    chain = Chain()
    command: Sequence[str] | None = start
    for i, moment in enumerate([*moments, None]):
        if command is None:
            break
        child = Child(command, progress, logs / f"{i}.err", env)
        outcome = child.finish(deadline) if moment is None else child.kill_at(moment, deadline)
        chain.children.append(outcome)
        chain.used += moment is not None
        if outcome.returncode not in (0, -signal.SIGKILL):
            raise AssertionError(f"child {i} failed\n{chain.describe()}")
        command = resume()
    return chain


def file_bytes(
    root: Path, normalize: dict[str, Callable[[bytes], bytes]] | None = None, skip: frozenset[str] = frozenset()
) -> dict[str, bytes]:
    """Every file under `root` by relative path but those named in `skip`, those whose name `normalize` lists
    passed through it first."""
    normalize = normalize or {}
    out = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.name not in skip):
        data = path.read_bytes()
        out[path.relative_to(root).as_posix()] = normalize[path.name](data) if path.name in normalize else data
    return out


def json_without(*keys: str, per_task: tuple[str, ...] = ()) -> Callable[[bytes], bytes]:
    """A normalizer: the JSON document without these top-level keys (timestamps, run ids, durations), and
    without the `per_task` keys of each entry under its `results` (a run's timing and token counts)."""

    def drop(data: bytes) -> bytes:
        doc = {k: v for k, v in json.loads(data).items() if k not in keys}
        if per_task and isinstance(doc.get("results"), dict):
            doc["results"] = {t: {k: v for k, v in r.items() if k not in per_task} for t, r in doc["results"].items()}
        return json.dumps(doc, sort_keys=True).encode()

    return drop
