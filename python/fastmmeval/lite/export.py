"""Choose a lite subset of each task and write it where both tools and people can read it.

For each task, `DIR/<task>.json` holds the selection (task fingerprint, method, size, seed,
encoders, covering radius, doc ids in pick order), `DIR/<task>.txt` the doc ids one per line, and
`DIR/<task>_lite.yaml` a subset task file, so `fastmmeval run --include_path DIR --tasks
<task>_lite` (or `--tasks lite` for all of them) evaluates only those docs. A prefix of a k-center
pick order is itself a k-center selection of that size.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fastmmeval.errors import ConfigError
from fastmmeval.images import DEFAULT_MAX_PIXELS
from fastmmeval.lite.baselines import kmeans_subset, random_subset, stratified_subset
from fastmmeval.lite.embed import Embeddings, embed_task, image_encoder, text_encoder
from fastmmeval.tasks import resolve
from fastmmeval.tasks.sources import cache_dir
from fastmmeval.tasks.task import Task
from fastmmeval.util import write_bytes_atomic, write_json_atomic

METHODS = ("kcenter", "random", "kmeans", "stratified")
SELECTION_FORMAT = "fastmmeval-lite-selection/1"
LITE_SUFFIX = "_lite"
LITE_GROUP = "lite"


@dataclass
class SelectOptions:
    """How subsets are chosen, among the first `limit` docs of a task (all when None, as in
    `fastmmeval run --limit`). `category_field` (a doc field) is needed by `stratified`;
    encoders, `image_weight`, `device` and `storage` matter to the embedding methods only, as do
    `max_image_pixels` and `allow_absolute_image_paths` (how task images are read, as in `run`)."""

    size: int
    method: str = "kcenter"
    seed: int = 0
    limit: int | None = None
    image_encoder: str = "auto"
    text_encoder: str = "auto"
    image_weight: float = 0.5
    category_field: str | None = None
    device: str = "cpu"
    storage: str = "float16"
    cache: Path = field(default_factory=lambda: cache_dir() / "lite")
    progress: bool = True
    max_image_pixels: int | None = DEFAULT_MAX_PIXELS
    allow_absolute_image_paths: bool = False


@dataclass
class Selection:
    """The docs chosen for one task and how they were chosen."""

    task: str
    task_fingerprint: str
    method: str
    size: int
    n_docs: int
    seed: int
    doc_ids: list[str]
    limit: int | None = None
    encoders: dict[str, Any] | None = None
    image_weight: float | None = None
    covering_radius: float | None = None
    note: str = ""
    format: str = SELECTION_FORMAT
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S"))


def _pick(opts: SelectOptions, n: int, features: np.ndarray | None, categories: list[str] | None) -> np.ndarray:
    """Indices (pick order) of `opts.size` of `n` candidates by `opts.method`."""
    method = opts.method
    if method == "kcenter":
        from fastmmeval.lite.kcenter import greedy_k_center

        return greedy_k_center(features, opts.size, seed=opts.seed, device=opts.device, storage=opts.storage)
    if method == "kmeans":
        return kmeans_subset(features, opts.size, seed=opts.seed)
    if method == "stratified":
        return stratified_subset(categories, opts.size, seed=opts.seed)
    return random_subset(n, opts.size, seed=opts.seed)


def _categories(task: Task, ids: list[str], field_name: str | None) -> list[str]:
    """The value of `field_name` for each doc of `ids` (as text; a missing value is its own category)."""
    if field_name is None:
        raise ConfigError("--method stratified needs --category_field (a doc field such as 'category')")
    index = {r.id: r.index for r in task.doc_refs()}
    column = task.rows.column(field_name)
    if all(v is None for v in column):
        raise ConfigError(f"task {task.name}: no doc has the field {field_name!r} given by --category_field")
    return [str(column[index[i]]) for i in ids]


def select_task(task: Task, opts: SelectOptions, embed: Any = None) -> Selection:
    """The subset of `task` chosen by `opts.method`; `embed(task) -> Embeddings` supplies features
    for the embedding methods (k-center, k-means) and, when given, the covering radius of any
    method's pick. A size of at least the task's doc count keeps the task whole."""
    if opts.method not in METHODS:
        raise ConfigError(f"unknown selection method {opts.method!r}; choose one of {', '.join(METHODS)}")
    if opts.size < 1:
        raise ConfigError(f"--size must be positive, got {opts.size}")
    refs = task.doc_refs(opts.limit)
    base = dict(task=task.name, task_fingerprint=task.fingerprint(), method=opts.method, size=opts.size,
                n_docs=len(refs), seed=opts.seed, limit=opts.limit)
    if opts.size >= len(refs):
        note = f"size {opts.size} >= the task's {len(refs)} docs: kept whole"
        return Selection(**base, doc_ids=[r.id for r in refs], note=note)
    emb: Embeddings | None = embed(task) if embed is not None else None
    if emb is None and opts.method in ("kcenter", "kmeans"):
        raise ConfigError(f"--method {opts.method} needs doc embeddings")
    ids, features = [r.id for r in refs], None
    if emb is not None:  # embeddings cover every renderable doc; keep those within the limit
        wanted = set(ids)
        rows = [i for i, d in enumerate(emb.doc_ids) if d in wanted]
        ids, features = [emb.doc_ids[i] for i in rows], emb.joint(opts.image_weight)[rows]
    note = f"{len(refs) - len(ids)} doc(s) that cannot be rendered were not candidates" if len(ids) < len(refs) else ""
    if opts.size >= len(ids):
        return Selection(**base, doc_ids=ids, note=f"{note}; the {len(ids)} others are kept whole")
    categories = _categories(task, ids, opts.category_field) if opts.method == "stratified" else None
    picked = _pick(opts, len(ids), features, categories)
    radius = None
    if features is not None:
        from fastmmeval.lite.kcenter import covering_radius

        radius = float(covering_radius(features, picked))
    return Selection(**base, doc_ids=[ids[i] for i in picked], encoders=emb.encoders if emb else None,
                     image_weight=opts.image_weight if emb else None, covering_radius=radius, note=note)


def write_selection(out: Path, selection: Selection) -> Path:
    """Write `<task>.json`, `<task>.txt` and `<task>_lite.yaml` into `out`; returns the YAML path."""
    name = selection.task
    write_json_atomic(out / f"{name}.json", asdict(selection))
    write_bytes_atomic(out / f"{name}.txt", "".join(f"{i}\n" for i in selection.doc_ids).encode("utf-8"))
    how = f"{selection.method}, seed {selection.seed}"
    yaml = (
        f"# Written by `fastmmeval lite select`: {name} restricted to the docs listed in {name}.txt\n"
        f"# (selection details in {name}.json).\n"
        f"task: {name}{LITE_SUFFIX}\n"
        f"subset_of: {name}\n"
        f"doc_ids: {name}.txt\n"
        f"group: {LITE_GROUP}\n"
        f'description: "{name}: {len(selection.doc_ids)} of {selection.n_docs} docs ({how})"\n'
    )
    path = out / f"{name}{LITE_SUFFIX}.yaml"
    write_bytes_atomic(path, yaml.encode("utf-8"))
    return path


def read_selection(path: Path) -> Selection:
    """A selection written by `write_selection` (its `<task>.json`)."""
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: cannot read the lite selection: {e}") from None
    if not isinstance(data, dict) or data.get("format") != SELECTION_FORMAT:
        raise ConfigError(f"{path}: not a lite selection file (format {SELECTION_FORMAT!r} expected)")
    try:
        return Selection(**data)
    except TypeError as e:
        raise ConfigError(f"{path}: malformed lite selection: {e}") from None


def select(tasks: list[str], out: Path, opts: SelectOptions, include_path: list[Path] | None = None) -> list[Selection]:
    """Choose and write a subset of every task (groups expanded) into `out`; each task's files
    are written as soon as it is done."""
    embed = None
    if opts.method in ("kcenter", "kmeans"):
        images, texts = image_encoder(opts.image_encoder), text_encoder(opts.text_encoder)

        def embed(task: Task) -> Embeddings:
            return embed_task(task, images, texts, opts.cache, progress=opts.progress)

    selections = []
    for task in resolve(tasks, include_path or (), opts.max_image_pixels, opts.allow_absolute_image_paths):
        selection = select_task(task, opts, embed)
        write_selection(out, selection)
        selections.append(selection)
    return selections
