"""How many docs a task has, as `fastmmeval tasks` lists it: counted from the task's data where this
machine holds it (a split saved under --data_dir, the Hugging Face datasets cache, local files), read
without loading it (arrow record-batch headers, parquet footers; no image is decoded, nothing is
fetched), else the count its task file declares (`docs:`)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastmmeval.errors import FastmmevalError
from fastmmeval.tasks.config import DatasetSpec, TaskConfig
from fastmmeval.tasks.sources import built_dir, data_dir, resolve_path, saved_split_dir
from fastmmeval.util import iter_jsonl

COUNTED, LISTED, DECLARED = "counted", "listed", "declared"
Where = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class DocCount:
    """A task's doc count (None: unknown) and where it comes from: `counted` from its data on this
    machine, `listed` in a subset task's id file, `declared` by its task file (the data is not here)."""

    n: int | None
    source: str | None


def doc_count(config: TaskConfig) -> DocCount:
    """The doc count of a task: its data's rows that pass its `where`, counted where the data is on this
    machine; a subset's listed ids; else the task file's `docs:`."""
    if config.doc_ids is not None:
        return DocCount(len(config.doc_ids), LISTED)
    counted = rows_on_disk(config.dataset, config.split, config.where)
    if counted is not None:
        return DocCount(counted, COUNTED)
    return DocCount(config.docs, DECLARED if config.docs is not None else None)


def rows_on_disk(spec: DatasetSpec, split: str, where: Where = ()) -> int | None:
    """The rows of `split` that pass `where`, from the copy of its data the task would load here;
    None when there is none (or it cannot be read: a run says why)."""
    import pyarrow as pa

    try:
        if spec.data_files:
            base = built_dir(spec.builder) if spec.builder else Path(spec.base_dir)
            files = [resolve_path(base, f) for f in spec.data_files.get(split, [])]
            counts = [_file_rows(f, where) for f in files]
            return sum(counts) if counts and None not in counts else None  # type: ignore[arg-type]
        if spec.load_from_disk:
            return _saved_rows(resolve_path(Path(spec.base_dir), spec.load_from_disk), split, where)
        root = data_dir()
        if root is not None and saved_split_dir(root, spec, split).is_dir():
            return _saved_rows(saved_split_dir(root, spec, split), split, where)
        return _cached_rows(root or hf_datasets_cache(), spec, split, where)
    except (OSError, ValueError, KeyError, pa.ArrowException, FastmmevalError):
        return None


def hf_datasets_cache() -> Path:
    """Where `datasets` keeps the hub datasets it has prepared: $HF_DATASETS_CACHE, else
    $HF_HOME/datasets, as `datasets.config` has it (without importing `datasets`, which takes a second)."""
    from huggingface_hub import constants

    return Path(os.environ.get("HF_DATASETS_CACHE") or Path(constants.HF_HOME) / "datasets").expanduser()


def _kept(n: int, column: Callable[[str], list[Any]], where: Where) -> int:
    """How many of `n` rows have every `where` field equal to its value (as a string, not None)."""
    if not where:
        return n
    columns = [(column(name), wanted) for name, wanted in where]
    return sum(all(values[i] is not None and str(values[i]) == wanted for values, wanted in columns) for i in range(n))


def _file_rows(path: Path, where: Where) -> int | None:
    """The rows of a local .jsonl/.json or .parquet data file."""
    if not path.is_file():
        return None
    if path.suffix in (".jsonl", ".json"):
        rows = [row for _, row in iter_jsonl(path)]
        return _kept(len(rows), lambda name: [row.get(name) for row in rows], where)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        file = pq.ParquetFile(path)
        n, names = file.metadata.num_rows, set(file.schema_arrow.names)
        table = file.read(columns=[k for k, _ in where if k in names]) if where else None
        return _kept(n, lambda name: table.column(name).to_pylist() if name in names else [None] * n, where)
    return None


def _saved_rows(folder: Path, split: str, where: Where) -> int | None:
    """The rows of a split saved with save_to_disk: the folder (a Dataset) or its `split` (a DatasetDict)."""
    if (folder / "dataset_dict.json").is_file():
        folder = folder / split
    state = folder / "state.json"
    if not state.is_file():
        return None
    files = [folder / f["filename"] for f in json.loads(state.read_text())["_data_files"]]
    return _arrow_rows(files, where)


def _cached_rows(root: Path, spec: DatasetSpec, split: str, where: Where) -> int | None:
    """The rows of a hub split in a `datasets` cache under `root`: the newest prepared copy of the
    dataset's config (ROOT/<owner>___<name in snake case>/<config>/<version>/<hash>/), as offline
    `datasets` picks it."""
    if spec.path is None or not root.is_dir():
        return None
    owner, _, name = spec.path.rpartition("/")
    squashed = name.lower().replace("_", "")  # datasets writes the name in snake case: MMBench -> mm_bench
    prefix = f"{owner}___" if owner else ""
    folders = [
        d for d in root.iterdir()
        if d.name.startswith(prefix) and d.name[len(prefix):].replace("_", "") == squashed
    ]  # fmt: skip
    config = spec.name or "default"
    copies = [c for d in folders for c in d.glob(f"{config}/*/*") if (c / "dataset_info.json").is_file()]
    if not copies:
        return None
    newest = max(copies, key=lambda c: c.stat().st_mtime)
    shard = re.compile(rf".+-{re.escape(split)}(-\d+-of-\d+)?\.arrow")
    files = sorted(f for f in newest.iterdir() if shard.fullmatch(f.name))
    return _arrow_rows(files, where) if files else None


def _arrow_rows(files: list[Path], where: Where) -> int:
    """The rows of `datasets` arrow files (IPC streams), read batch by batch from a memory map: only the
    batch headers and the `where` columns are touched."""
    import pyarrow as pa

    n = 0
    for path in files:
        with pa.memory_map(str(path)) as source:
            n += sum(_batch_rows(batch, where) for batch in pa.ipc.open_stream(source))
    return n


def _batch_rows(batch: Any, where: Where) -> int:
    names, n = set(batch.schema.names), batch.num_rows
    return _kept(n, lambda name: batch.column(name).to_pylist() if name in names else [None] * n, where)
