"""One writer per run folder: an OS lock on `<run>/.lock`, which the OS releases when its holder exits, even
when it is killed with -9, so a killed run can always be resumed. The file names its holder for the error
a second writer gets."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fastmmeval.errors import ConfigError

LOCK_NAME = ".lock"


@contextmanager
def run_lock(root: Path, command: list[str]) -> Iterator[None]:
    """Hold the run folder `root` for writing while the block runs; ConfigError naming the holder
    (pid, host, start time, command) when another process holds it."""
    path = root / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)  # not truncated: it names the current holder
    except OSError as e:
        raise ConfigError(f"{root}: cannot write in this run folder ({e.strerror})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(f"{root}: another fastmmeval run is writing this run folder ({_holder(path)}); "
                              "wait for it to finish or stop it, then --resume") from None
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                  "command": command}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder) + "\n").encode("utf-8"), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        return (f"pid {info['pid']} on {info['host']}, started {info['started']}: "
                f"{' '.join(str(a) for a in info['command'])}")
    except (OSError, ValueError, KeyError, TypeError):
        return "its holder has not written its name yet"
