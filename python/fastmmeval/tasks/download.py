"""Saving the hub data of tasks for offline runs (`fastmmeval tasks --download`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from fastmmeval.tasks.catalog import Catalog
from fastmmeval.tasks.config import DatasetSpec
from fastmmeval.tasks.processors import PROCESSOR_DATA
from fastmmeval.tasks.sources import download_split


def download(
    names: Iterable[str], data_dir: Path, include_path: Iterable[str | Path] = ()
) -> Iterator[tuple[DatasetSpec, str, Path]]:
    """Fetch every hub split the named tasks and groups read (their own split and those their doc
    processors read, each once) and save it under `data_dir`; yields (dataset, split, saved folder)
    as each one is saved. Needs network."""
    configs = Catalog(Path(p) for p in include_path).resolve(names)
    splits = [(c.dataset, c.split) for c in configs if c.dataset.path]
    splits += [extra for c in configs if c.process_doc for extra in PROCESSOR_DATA.get(c.process_doc, [])]
    wanted = {(spec.path, spec.name or "", spec.revision or "", split): (spec, split) for spec, split in splits}
    for key in sorted(wanted):
        spec, split = wanted[key]
        yield spec, split, download_split(spec, split, data_dir)
