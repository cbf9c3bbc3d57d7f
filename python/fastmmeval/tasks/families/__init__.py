"""Benchmark-specific Python (doc processors, extractors, metrics), one module per benchmark
family, registered by name for the task files in `tasks/builtin/`."""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
