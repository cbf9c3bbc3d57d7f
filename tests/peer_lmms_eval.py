"""lmms-eval 0.7.3, the peer our metrics are compared with, imported module by module.

It is a test dependency installed without its dependency set (`pip install --no-deps
lmms-eval==0.7.3`, plus loguru, sacrebleu, evaluate and pytz for `lmms_eval.api.metrics`).
`lmms_eval/tasks/__init__.py` indexes every task and needs that whole set, so task modules are
imported under a bare stand-in for the `lmms_eval.tasks` package instead.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
import types
from pathlib import Path

VERSION = "0.7.3"


def lmms_eval_module(name: str) -> types.ModuleType:
    """The module `lmms_eval.<name>` of lmms-eval 0.7.3, e.g. "tasks.pope.utils" or "api.metrics"."""
    installed = importlib.metadata.version("lmms-eval")
    assert installed == VERSION, f"the tests compare with lmms-eval {VERSION}, found {installed}"
    full = f"lmms_eval.{name}"
    if full in sys.modules or not name.startswith("tasks."):
        return importlib.import_module(full)
    spec = importlib.util.find_spec("lmms_eval")
    assert spec is not None and spec.submodule_search_locations
    stand_in = "lmms_eval.tasks" not in sys.modules
    if stand_in:
        package = types.ModuleType("lmms_eval.tasks")
        package.__path__ = [str(Path(spec.submodule_search_locations[0]) / "tasks")]
        sys.modules["lmms_eval.tasks"] = package
    try:
        return importlib.import_module(full)
    finally:
        if stand_in:
            del sys.modules["lmms_eval.tasks"]
