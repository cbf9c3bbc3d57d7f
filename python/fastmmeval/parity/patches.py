"""Patches of lmms-eval's code while a parity check runs it: module attributes replaced for the
duration of a block (`Patched`, with `Fresh` values made anew each time), and the patches each
lmms-eval task folder needs to run here, registered by `parity.setups` (`PEER_SETUPS`)."""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import types
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from fastmmeval.registry import Registry

# By lmms-eval task folder (e.g. "coco_cap"): a function adding its patches to a PeerTask.
PEER_SETUPS: Registry[Callable[[Any], None]] = Registry("lmms-eval task setup")


def set_up(peer: Any, folder: str) -> None:
    """Add the patches registered for the lmms-eval task folder `folder` to `peer` (none for most)."""
    if folder in PEER_SETUPS:
        PEER_SETUPS.get(folder)(peer)


@dataclass(frozen=True)
class Fresh:
    """A patch value made anew each time the patches are applied (e.g. a module-level dict of
    running totals that an aggregation adds to, which would otherwise carry over between runs)."""

    make: Callable[[], Any]


_quiet_depth = 0


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """lmms-eval's prints, log lines and warnings dropped (pycocoevalcap's progress alone is thousands
    of lines a check, burying the report; a warning is no error in lmms-eval's own run, e.g. numpy's
    on LiveBench's mean of a subtask without docs, whatever filter the caller has set); nested uses
    are fine."""
    from loguru import logger

    global _quiet_depth
    _quiet_depth += 1
    logger.disable("lmms_eval")
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        _quiet_depth -= 1
        if not _quiet_depth:
            logger.enable("lmms_eval")


class Patched:
    """Sets module attributes for the duration of a block (nested uses are fine), quietly, in a
    scratch working folder: lmms-eval's aggregations write report and submission files under the
    current one when no run's output path is given."""

    def __init__(self, module: Callable[[str], types.ModuleType], patches: Mapping[str, Any]) -> None:
        self.module, self.patches = module, patches
        self.saved: list[tuple[types.ModuleType, str, Any]] = []
        self.cwd: str | None = None
        self.scratch: tempfile.TemporaryDirectory[str] | None = None
        self.quiet = contextlib.ExitStack()

    def __enter__(self) -> None:
        self.quiet.enter_context(_quiet())
        self.cwd = os.getcwd()
        self.scratch = tempfile.TemporaryDirectory(prefix="fastmmeval-parity-")
        os.chdir(self.scratch.name)
        for target, value in self.patches.items():
            module_name, attr = target.rsplit(".", 1)
            module = self.module(module_name)
            self.saved.append((module, attr, getattr(module, attr)))
            setattr(module, attr, value.make() if isinstance(value, Fresh) else value)

    def __exit__(self, *exc: object) -> None:
        for module, attr, value in reversed(self.saved):
            setattr(module, attr, value)
        self.saved.clear()
        if self.cwd is not None and self.scratch is not None:
            os.chdir(self.cwd)
            self.scratch.cleanup()
        self.quiet.close()
