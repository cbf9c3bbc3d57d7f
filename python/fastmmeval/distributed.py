"""Data parallelism: the ranks of a run, how they exchange results and failures, and a local launcher.

Ranks talk through torch.distributed with the gloo backend (only Python objects travel). Every
exchange carries an error slot, so an exception on one rank reaches every other rank at its next
exchange and each stops with the same one-line message instead of waiting forever.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from fastmmeval.errors import FastmmevalError
from fastmmeval.util import available_cores

T = TypeVar("T")
# How long the launcher waits, beyond the timeout, for ranks to stop by themselves after one failed.
_GRACE_S = 10.0


class DistributedError(FastmmevalError):
    """A rank failed, or lost contact with the others; the message names the rank."""


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if isinstance(e, FastmmevalError) else f"{type(e).__name__}: {text}"


@dataclass(frozen=True)
class Ranks:
    """This process's place among the processes of a run (rank 0 of 1 without data parallelism)."""

    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0, the only one that writes the run folder."""
        return self.rank == 0

    def share(self, value: T) -> list[T]:
        """Every rank's `value`, by rank, on every rank. All ranks call it equally often; it raises
        DistributedError on every rank when another rank failed."""
        errors, values = self._exchange(None, value)
        if errors:
            raise DistributedError(errors[0])
        return values

    @contextmanager
    def guard(self) -> Iterator[None]:
        """Turn an exception raised on this rank into a DistributedError naming it, raised on this
        rank now and on every other rank at its next `share`."""
        try:
            yield
        except DistributedError:
            raise
        except Exception as e:
            if self.world_size == 1:
                raise
            errors, _ = self._exchange(f"rank {self.rank} failed: {_one_line(e)}", None)
            raise DistributedError(errors[0]) from e

    def _exchange(self, error: str | None, value: T) -> tuple[list[str], list[T]]:
        if self.world_size == 1:
            return ([error] if error else []), [value]
        import torch.distributed as dist

        gathered: list[Any] = [None] * self.world_size
        try:
            dist.all_gather_object(gathered, (error, value))
        except RuntimeError as e:
            lost = f"rank {self.rank} lost contact with the other ranks (one failed or hung): {_one_line(e)}"
            raise DistributedError(error or lost) from e
        return [err for err, _ in gathered if err is not None], [v for _, v in gathered]


ONE_PROCESS = Ranks()


@contextmanager
def joined(timeout_s: float) -> Iterator[Ranks]:
    """Join the process group that torchrun-style variables describe (RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT), with `timeout_s` as the longest wait for another rank; leave it on exit."""
    import torch
    import torch.distributed as dist

    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    try:
        dist.init_process_group("gloo", timeout=timedelta(seconds=timeout_s))
    except (RuntimeError, ValueError) as e:
        rank = os.environ.get("RANK", "?")
        raise DistributedError(f"rank {rank} could not join the other ranks: {_one_line(e)}") from e
    try:
        yield Ranks(dist.get_rank(), dist.get_world_size())
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(argv: list[str], num_processes: int, timeout_s: float) -> int:
    """Run `fastmmeval <argv>` as `num_processes` ranks on this machine and wait for all of them.
    Each rank gets an equal share of this process's cores as its thread count, unless
    OMP_NUM_THREADS is set (torch would otherwise give every rank all the cores). Returns 0, or the
    exit status of the first rank seen failing; ranks still running `timeout_s` (plus a grace
    period) after a failure are killed."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    env.setdefault("OMP_NUM_THREADS", str(max(1, available_cores() // num_processes)))
    env.update(WORLD_SIZE=str(num_processes), LOCAL_WORLD_SIZE=str(num_processes))
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "fastmmeval.cli", *argv],
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
            start_new_session=True,  # a Ctrl-C reaches them once, forwarded below
        )
        for r in range(num_processes)
    ]
    status = 0
    deadline = float("inf")
    try:
        while None in (codes := [p.poll() for p in procs]) and time.monotonic() < deadline:
            failed = next((r for r, code in enumerate(codes) if code not in (None, 0)), None)
            if failed is not None and status == 0:
                status = _exit_status(failed, codes[failed])
                deadline = time.monotonic() + timeout_s + _GRACE_S
            time.sleep(0.1)
        for r, p in enumerate(procs):
            if p.poll() is None:
                print(f"fastmmeval: error: rank {r} did not stop after another rank failed; killed", file=sys.stderr)
                p.kill()
    except KeyboardInterrupt:
        for p in procs:
            p.send_signal(signal.SIGINT)
        status = 130
    finally:
        for p in procs:
            p.wait()
    failed = next((r for r, p in enumerate(procs) if p.returncode != 0), None)
    return status or (0 if failed is None else _exit_status(failed, procs[failed].returncode))


def _exit_status(rank: int, returncode: int) -> int:
    if returncode < 0:  # killed by a signal, so it could not say why: say it here
        print(f"fastmmeval: error: rank {rank} was killed by {signal.Signals(-returncode).name}", file=sys.stderr)
        return 1
    return returncode
