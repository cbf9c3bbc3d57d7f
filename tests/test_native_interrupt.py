"""Ctrl-C stops long native calls: a child process in a k-center run, an n-gram map or a segment merge gets
SIGINT and raises KeyboardInterrupt within a second, and the interrupted build leaves no files behind."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from fastmmeval.contam import NgramIndex

# The child prints "go" just before the long call; a KeyboardInterrupt it raises prints the monotonic time
# (shared with the parent) at which Python saw it, then what the call left in `folder`.
CHILD = """
import os, signal, sys, time
import numpy as np
from fastmmeval import _core

signal.signal(signal.SIGINT, signal.default_int_handler)  # a child started with SIGINT ignored keeps it so
rng = np.random.default_rng(0)
folder, scratch = sys.argv[1:]  # what the call may leave files in (listed after it), scratch space
{setup}
print("go", flush=True)
try:
    {call}
except KeyboardInterrupt:
    print("KeyboardInterrupt", time.monotonic(), sorted(os.listdir(folder)), flush=True)
else:
    print("finished", flush=True)
"""

SETTLE_S = 0.3  # how long the call runs before the signal
LATENCY_S = 1.0


def interrupt(tmp_path: Path, setup: str, call: str) -> list[str]:
    """Runs the child, sends SIGINT SETTLE_S into the call and returns the words of its last line, after
    checking that it raised KeyboardInterrupt within LATENCY_S and exited soon after."""
    code = CHILD.format(setup=textwrap.dedent(setup).strip(), call=call)
    (tmp_path / "out").mkdir()
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path / "out"), str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "go\n"
        time.sleep(SETTLE_S)
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=30)
        exited = time.monotonic() - sent
    finally:
        child.kill()
    words = out.split(maxsplit=2)
    assert words[0] == "KeyboardInterrupt", out
    latency = float(words[1]) - sent
    assert 0 < latency < LATENCY_S, f"KeyboardInterrupt {latency:.3f} s after SIGINT"
    assert exited < 2 * LATENCY_S, f"exited {exited:.3f} s after SIGINT"
    assert child.returncode == 0
    return words


def test_ctrl_c_stops_a_k_center_run(tmp_path: Path) -> None:
    # k = n: thousands of seconds uninterrupted (a pass over the rows per pick), on all cores.
    interrupt(
        tmp_path,
        "x = rng.standard_normal((200_000, 64), dtype=np.float32).astype(np.float16)",
        "_core.greedy_k_center(x, len(x), 0)",
    )


def test_ctrl_c_stops_a_map_and_removes_its_runs(tmp_path: Path) -> None:
    # ~4 s uninterrupted on 2 cores; a 16 MiB budget spills runs all along.
    words = interrupt(
        tmp_path,
        """
        tokens = rng.integers(0, 1 << 16, size=120_000_000, dtype=np.uint16)
        offsets = np.arange(0, len(tokens), 10_000, dtype=np.int64)
        mapper = _core.NgramMapper(os.path.join(folder, "m-"), 64, 10, 4, False, 16 << 20, 2)
        """,
        "mapper.add(tokens, offsets, 0)",
    )
    assert words[2] == "[]\n"


def test_ctrl_c_stops_a_merge_and_leaves_no_segment(tmp_path: Path) -> None:
    # The one run of 4M windows merged with 63 copies of itself: many seconds uninterrupted.
    words = interrupt(
        tmp_path,
        """
        mapper = _core.NgramMapper(os.path.join(scratch, "m-"), 8, 10, 0, False, 256 << 20, 2)
        mapper.add(rng.integers(0, 1 << 30, size=4_000_000, dtype=np.uint32), np.zeros(1, np.int64), 0)
        inputs = mapper.finish() * 64
        """,
        "_core.merge_segments(inputs, os.path.join(folder, 'p00000.seg'), 8, 10, 0, 0, False)",
    )
    assert words[2] == "[]\n"


def test_ctrl_c_stops_an_index_build_and_publishes_nothing(tmp_path: Path) -> None:
    # Blocks of 100M tokens (seconds of mapping each): a map left to finish its block after Ctrl-C would keep the
    # child alive for seconds.
    interrupt(
        tmp_path,
        """
        from fastmmeval.contam import IndexSettings, NgramIndex, TokenBlock

        tokens = rng.integers(0, 1 << 16, size=100_000_000, dtype=np.uint16)
        offsets = np.arange(0, len(tokens), 1_000_000, dtype=np.int64)

        class Blocks:
            name = "random"

            def blocks(self):
                for i in range(3):
                    yield TokenBlock(tokens, offsets, 0, [f"{i}-{d}" for d in range(len(offsets))])

            def missing_images(self):
                return 0

        index = NgramIndex.create(os.path.join(scratch, "index"), IndexSettings(memory_bytes=64 << 20), {})
        """,
        "index.add([Blocks()], progress=False, keep_image_tokens=False)",
    )
    totals = NgramIndex.open(tmp_path / "index").stats()
    assert totals["generations"] == 0 and totals["tokens"] == 0, totals
