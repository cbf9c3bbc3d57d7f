"""One writer per run folder: a second `--resume` of a run that is being written is refused, naming the
holder; the lock dies with its holder, even under kill -9, so the run resumes afterwards."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from cli_fixtures import run_argv, write_tasks

from fastmmeval.cli import main
from fastmmeval.runlock import run_lock

HOLD = """
import sys, time
from pathlib import Path
from fastmmeval.runlock import run_lock
with run_lock(Path(sys.argv[1]), ["fastmmeval", "run", "--resume"]):
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_second_writer_is_refused_with_the_holder_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks, out = write_tasks(tmp_path / "tasks"), tmp_path / "runs"
    assert main(run_argv(tasks, out, "--limit", "4")) == 0
    [run] = out.iterdir()
    capsys.readouterr()
    with run_lock(run, ["fastmmeval", "run", "--tasks", "qa"]):
        assert main(run_argv(tasks, out, "--limit", "4", "--resume")) == 1
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert f"{run}: another fastmmeval run is writing this run folder" in err
        assert f"pid {os.getpid()} on {socket.gethostname()}" in err and "fastmmeval run --tasks qa" in err
        assert main(run_argv(tasks, out, "--limit", "4", "--resume", str(run))) == 1
    for task in ("qa_a", "qa_b"):  # nothing was appended by the refused runs
        assert len((run / "samples" / f"{task}.jsonl").read_text().splitlines()) == 4


def test_the_lock_of_a_process_killed_with_sigkill_is_released(tmp_path: Path) -> None:
    tasks, out = write_tasks(tmp_path / "tasks"), tmp_path / "runs"
    assert main(run_argv(tasks, out, "--limit", "4")) == 0
    [run] = out.iterdir()
    samples = run / "samples" / "qa_a.jsonl"
    samples.write_text("".join(samples.read_text().splitlines(keepends=True)[:2]))  # as if killed mid-task
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(run_argv(tasks, out, "--limit", "4", "--resume", str(run))) == 1  # held
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert main(run_argv(tasks, out, "--limit", "4", "--resume", str(run))) == 0  # the holder is gone
    ids = [json.loads(line)["doc_id"] for line in samples.read_text().splitlines()]
    assert ids == ["d0", "d1", "d2", "d3"]
