"""Dataset sources: where a task's rows come from (hub, disk, jsonl/parquet, builders)."""

from __future__ import annotations

import argparse
import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from fastmmeval.errors import ConfigError, DocError, FailureKind
from fastmmeval.registry import Registry
from fastmmeval.tasks.config import DatasetSpec
from fastmmeval.util import iter_jsonl

# A builder writes a dataset's files (jsonl/parquet + images) into the folder it is given;
# the task's `dataset.data_files` are then read relative to that folder.
DATASET_BUILDERS: Registry[Callable[[Path], None]] = Registry("dataset builder")
DATA_DIR_ENV = "FASTMMEVAL_DATA_DIR"


def cache_dir() -> Path:
    """Where built datasets live: $FASTMMEVAL_CACHE or ~/.cache/fastmmeval."""
    return Path(os.environ.get("FASTMMEVAL_CACHE", Path.home() / ".cache" / "fastmmeval"))


class Rows(Sequence):
    """Random access to a split's rows as dicts, plus where relative image paths start."""

    def __init__(self, data: Any, image_root: Path | None, identity: dict[str, Any]) -> None:
        self._data = data
        self.image_root = image_root
        self.identity = identity

    def __len__(self) -> int:
        return len(self._data)

    @property
    def features(self) -> Any:
        """The rows' `datasets.Features` when `datasets` read them (hub, save_to_disk); None for rows read
        from jsonl or parquet files."""
        return None if isinstance(self._data, list) else self._data.features

    def __getitem__(self, i: int) -> dict[str, Any]:  # type: ignore[override]
        if isinstance(self._data, list):
            return dict(self._data[i])
        try:
            return dict(self._data[i])
        except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError) as e:
            # `datasets` decodes a row's images as it reads it; PIL's bomb check holds them to the run's cap.
            raise DocError(
                f"an image of the row cannot be decoded: {type(e).__name__}: {e} (the cap is --max_image_pixels)",
                FailureKind.UNREADABLE_IMAGE,
            ) from None

    def column(self, name: str) -> list[Any]:
        """All values of one field, without decoding images (None where a row lacks it)."""
        if isinstance(self._data, list):
            return [row.get(name) for row in self._data]
        if name not in self._data.column_names:
            return [None] * len(self._data)
        return list(self._data[name])


def load_rows(spec: DatasetSpec, split: str) -> Rows:
    """The rows of `split` from the source `spec` names."""
    base = Path(spec.base_dir)
    if spec.builder:
        base = _built_folder(spec.builder)
    if spec.data_files:
        return _load_files(spec, split, base)
    if spec.load_from_disk:
        return _from_disk(resolve_path(base, spec.load_from_disk), split, spec)
    return _from_hub(spec, split)


def resolve_path(base: Path, p: str) -> Path:
    """A path of a task file's dataset (`~` expanded), taken from `base` unless it is absolute."""
    path = Path(os.path.expanduser(p))
    return path if path.is_absolute() else base / path


def built_dir(name: str) -> Path:
    """The folder the dataset builder `name` writes its files into (whether it has run or not)."""
    return cache_dir() / "datasets" / name


def _built_folder(name: str) -> Path:
    build = DATASET_BUILDERS.get(name)
    out = built_dir(name)
    build(out)
    return out


def _load_files(spec: DatasetSpec, split: str, base: Path) -> Rows:
    assert spec.data_files is not None
    if split not in spec.data_files:
        raise ConfigError(f"dataset.data_files has no split {split!r} (has: {', '.join(spec.data_files)})")
    files = [resolve_path(base, f) for f in spec.data_files[split]]
    rows: list[dict[str, Any]] = []
    digest = hashlib.sha256()
    for f in files:
        if not f.exists():
            raise ConfigError(f"dataset file not found: {f}")
        digest.update(f.read_bytes())
        if f.suffix in (".jsonl", ".json"):
            rows.extend(row for _, row in iter_jsonl(f))
        elif f.suffix == ".parquet":
            rows.extend(_parquet_rows(f))
        else:
            raise ConfigError(f"dataset file {f}: unsupported format (use .jsonl or .parquet)")
    image_root = resolve_path(base, spec.image_root) if spec.image_root else files[0].parent
    identity = {**spec.identity(), "split": split, "sha256": digest.hexdigest()[:16]}
    return Rows(rows, image_root, identity)


def _parquet_rows(path: Path) -> list[dict[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError) as e:  # not parquet, truncated, or a type Python cannot hold
        raise ConfigError(f"dataset file {path}: not a readable parquet file ({str(e)[:200]})") from None


def _pick_split(data: Any, split: str, where: str) -> Any:
    import datasets

    if isinstance(data, datasets.DatasetDict):
        if split not in data:
            raise ConfigError(f"{where} has no split {split!r} (has: {', '.join(data)})")
        return data[split]
    return data


def _from_disk(folder: Path, split: str, spec: DatasetSpec) -> Rows:
    return Rows(_read_saved(folder, split), folder, {**spec.identity(), "split": split})


def _read_saved(folder: Path, split: str) -> Any:
    """The split of a dataset saved with save_to_disk (a Dataset, or a DatasetDict holding it)."""
    import datasets

    if not folder.exists():
        raise ConfigError(f"dataset.load_from_disk: folder not found: {folder}")
    try:
        data = datasets.load_from_disk(str(folder))
    except (FileNotFoundError, ValueError) as e:
        raise ConfigError(f"{folder}: not a dataset saved with save_to_disk ({e})") from None
    return _pick_split(data, split, str(folder))


def data_dir() -> Path | None:
    """The offline dataset folder (`--data_dir`, i.e. $FASTMMEVAL_DATA_DIR), if one is set."""
    value = os.environ.get(DATA_DIR_ENV)
    return Path(value).expanduser() if value else None


def data_dir_flag(parser: argparse.ArgumentParser) -> None:
    """Add `--data_dir` to a subcommand that reads task data (`use_data_dir` puts it to use)."""
    parser.add_argument(
        "--data_dir",
        type=Path,
        default=None,
        help="offline hub datasets: folders saved by `fastmmeval tasks --download` or a Hugging Face "
        "datasets cache (default: $FASTMMEVAL_DATA_DIR)",
    )


def use_data_dir(folder: Path | None) -> None:
    """`--data_dir` reaches the dataset loader (and data-parallel workers) as $FASTMMEVAL_DATA_DIR; None
    leaves that as it is."""
    if folder is not None:
        os.environ[DATA_DIR_ENV] = str(folder.resolve())


def saved_split_dir(root: Path, spec: DatasetSpec, split: str) -> Path:
    """Where `download_split` keeps a hub dataset's split under `root`:
    ROOT/<hub id>[/<config name>]/<split>."""
    assert spec.path is not None
    folder = root / spec.path
    return (folder / spec.name if spec.name else folder) / split


def download_split(spec: DatasetSpec, split: str, root: Path) -> Path:
    """Fetch a hub dataset's split (needs network) and save it under `root` for offline runs."""
    data = _load_hub(spec, split, cache_dir=None)
    out = saved_split_dir(root, spec, split)
    tmp = out.with_name(out.name + ".partial")
    data.save_to_disk(str(tmp))
    if out.exists():
        import shutil

        shutil.rmtree(out)
    tmp.rename(out)
    return out


def _load_hub(spec: DatasetSpec, split: str, cache_dir: Path | None) -> Any:
    import datasets

    try:
        return datasets.load_dataset(
            spec.path, spec.name, split=split, revision=spec.revision, cache_dir=str(cache_dir) if cache_dir else None
        )
    except Exception as e:  # datasets raises many types for "not reachable / not found"
        where = (
            f" (looked for {saved_split_dir(cache_dir, spec, split)} and a Hugging Face cache in {cache_dir})"
            if cache_dir
            else ""
        )
        raise ConfigError(
            f"cannot load hub dataset {spec.path!r} split {split!r}{where}: {type(e).__name__}: {str(e)[:200]} "
            "(offline? pre-download it with `fastmmeval tasks --download` and pass --data_dir)"
        ) from None


def _from_hub(spec: DatasetSpec, split: str) -> Rows:
    root = data_dir()
    saved = saved_split_dir(root, spec, split) if root is not None else None
    data = _read_saved(saved, split) if saved is not None and saved.is_dir() else _load_hub(spec, split, root)
    return Rows(data, None, {**spec.identity(), "split": split, "fingerprint": data._fingerprint})
