"""`compare distribution`: are two versions of a benchmark drawn from the same images? (MMBench-Live
Sections 4.6-4.7.) Both tasks' images are embedded with one encoder (compare.encoders), compared by FID and
PCA-KL over seeded matched-sample trials (compare.alignment), and, when a category and a labeler are given,
by the label distribution of that category (compare.labels). Writes `distribution.json` and
`distribution.png` (both sets in the union's first two principal components) into the output folder.

An image set is every distinct image the task's docs show (the same pixels shown by several docs, as
MMBench's CircularEval rotations are, count once), read through the task as `fastmmeval run` reads it.
Embeddings are scaled to unit length before the statistics (`normalize`, the default: the scale of the
paper's FID values, 0.18-0.20 on CLIP embeddings, is that of unit vectors); `normalize=False` keeps the
encoder's raw features.
"""

from __future__ import annotations

import hashlib
import io
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from tqdm import tqdm

from fastmmeval.compare.alignment import PCA_DIM, RIDGE, TRIALS, Alignment, alignment, fid, pca_kl
from fastmmeval.compare.encoders import image_encoder
from fastmmeval.compare.labels import LabelReport, label_distribution
from fastmmeval.errors import ConfigError, DocError
from fastmmeval.images import DEFAULT_MAX_PIXELS
from fastmmeval.lite.embed import Encoder, unit_rows
from fastmmeval.live.roles import RoleSpec, build_roles
from fastmmeval.live.store import StageCache
from fastmmeval.tasks import resolve
from fastmmeval.tasks.task import Task
from fastmmeval.util import write_bytes_atomic, write_json_atomic

__all__ = ["DistributionReport", "ImageSet", "LabelSettings", "distribution", "fid", "pca_kl", "task_embeddings"]

REPORT_FORMAT = "fastmmeval-compare-distribution/1"
REPORT_FILE = "distribution.json"
PLOT_FILE = "distribution.png"
LABEL_CACHE = "labels_cache.sqlite"
SKIPPED_KEPT = 20  # skipped docs listed in the report (all are counted)


@dataclass(frozen=True)
class ImageSet:
    """What was embedded of one task: its docs, the distinct images they show, the docs without an image,
    and the docs that could not be read (counted; the first reasons kept)."""

    task: str
    docs: int
    images: int
    without_image: int
    skipped: int
    skipped_reasons: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LabelSettings:
    """The label distribution to add: the category (a value of the docs' field `field_name`), the role that
    labels its questions, how many calls at once, and the stage cache (default: in the output folder)."""

    category: str
    labeler: RoleSpec
    field_name: str = "category"
    workers: int = 8
    cache: Path | None = None


@dataclass(frozen=True)
class DistributionReport:
    """Tasks A and B compared: the encoder, whether embeddings were unit-scaled, each image set, the
    FID / PCA-KL alignment, the label distribution (None unless asked) and the files written."""

    task_a: str
    task_b: str
    encoder: dict[str, Any]
    normalized: bool
    images: list[ImageSet]
    alignment: Alignment
    labels: LabelReport | None
    files: list[str]
    format: str = REPORT_FORMAT
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S"))

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict of every field."""
        return asdict(self)

    def summary(self) -> str:
        """A few lines for the terminal."""
        al = self.alignment
        lines = [f"{self.task_a} ({al.n_a} images) vs {self.task_b} ({al.n_b} images), "
                 f"encoder {self.encoder.get('encoder')}, {al.trials} trials of {al.n_per_trial} images each"]
        if al.fid is not None:
            lines.append(f"FID {al.fid.mean:.4f} ± {al.fid.std:.4f}")
        if al.kl_ab is not None and al.kl_ba is not None and al.delta_kl is not None:
            lines.append(f"PCA-KL ({al.pca['dim_used']} dims, ridge {al.pca['ridge']:g}): "
                         f"KL(A||B) {al.kl_ab.mean:.3f}, KL(B||A) {al.kl_ba.mean:.3f}, dKL {al.delta_kl.mean:+.3f}")
        if self.labels is not None:
            lab = self.labels
            lines.append(f"labels of {lab.category}: {lab.a.vocabulary} vs {lab.b.vocabulary} labels; top "
                         f"{[t[0] for t in lab.a.top]} vs {[t[0] for t in lab.b.top]}, shared {lab.top_shared}")
            if lab.a.failed or lab.b.failed:
                lines.append(f"  unlabelled (failed calls or replies): {lab.a.failed} in A, {lab.b.failed} in B")
        for s in self.images:
            if s.skipped:
                example = next(iter(s.skipped_reasons.values()))
                lines.append(f"  {s.task}: {s.skipped} doc(s) could not be read, e.g. {example}")
        return "\n".join(lines)


def _pixels_key(image: Image.Image) -> str:
    return hashlib.sha256(f"{image.mode}{image.size}".encode() + image.tobytes()).hexdigest()


def task_embeddings(task: Task, encoder: Encoder, batch_size: int = 32, progress: bool = True) -> tuple[np.ndarray,
                                                                                                        ImageSet]:
    """The encoder's features of every distinct image the task's docs show (in order of first showing), and
    what was read."""
    seen: set[str] = set()
    batch: list[Image.Image] = []
    blocks: list[np.ndarray] = []
    refs = task.doc_refs()
    without, skipped = 0, {}
    for ref in tqdm(refs, desc=f"embed {task.name}", unit="doc", disable=not progress):
        try:
            images = task.request(task.doc(ref), seed=0).images
        except DocError as e:
            skipped[ref.id] = str(e)
            continue
        without += not images
        for image in images:
            key = _pixels_key(image)
            if key not in seen:
                seen.add(key)
                batch.append(image)
        if len(batch) >= batch_size:
            blocks.append(encoder.encode(batch))
            batch = []
    if batch:
        blocks.append(encoder.encode(batch))
    kept = dict(list(skipped.items())[:SKIPPED_KEPT])
    info = ImageSet(task.name, len(refs), len(seen), without, len(skipped), kept)
    if len(seen) < 2:
        raise ConfigError(f"task {task.name}: {len(seen)} distinct image(s) among its {len(refs)} docs; "
                          "a distribution needs at least 2")
    return np.concatenate(blocks).astype(np.float32), info


def _one_task(name: str, include_paths: Sequence[Path], max_image_pixels: int | None, absolute: bool) -> Task:
    tasks = resolve([name], include_paths, max_image_pixels, absolute)
    if len(tasks) != 1 or tasks[0].name != name:
        raise ConfigError(f"compare distribution: {name!r} is a group of tasks; name one task")
    return tasks[0]


def scatter_png(a: np.ndarray, b: np.ndarray, names: tuple[str, str], title: str) -> bytes:
    """A PNG of both embedding sets in the first two principal components of their union."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    union = np.vstack([a, b]).astype(np.float64)
    centred = union - union.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    points = centred @ vt[:2].T
    fig, ax = plt.subplots(figsize=(6.4, 5.0), dpi=120)
    for part, name, colour in ((points[: len(a)], names[0], "#4C72B0"), (points[len(a):], names[1], "#DD8452")):
        ax.scatter(part[:, 0], part[:, 1], s=8, alpha=0.5, color=colour, label=f"{name} ({len(part)})")
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def distribution(task_a: str, task_b: str, encoder: Encoder | str, out: Path, trials: int = TRIALS, seed: int = 0,
                 *, pca_dim: int = PCA_DIM, ridge: float = RIDGE, normalize: bool = True,
                 labels: LabelSettings | None = None, include_paths: Sequence[Path] = (),
                 max_image_pixels: int | None = DEFAULT_MAX_PIXELS, allow_absolute_image_paths: bool = False,
                 progress: bool = True) -> DistributionReport:
    """Compare the images of `task_a` and `task_b` (tasks of the catalog plus `include_paths`) by FID and
    PCA-KL on `encoder`'s embeddings (an Encoder, or a `--encoder` spec: efficientnet-lite0, clip=DIR),
    and, with `labels`, one category's label distribution; write distribution.json and distribution.png
    into `out`."""
    tasks = [_one_task(n, include_paths, max_image_pixels, allow_absolute_image_paths) for n in (task_a, task_b)]
    enc = image_encoder(encoder) if isinstance(encoder, str) else encoder
    features, sets = zip(*(task_embeddings(t, enc, progress=progress) for t in tasks), strict=True)
    a, b = (unit_rows(f) if normalize else f for f in features)
    aligned = alignment(a, b, trials, seed, dim=pca_dim, ridge=ridge)
    label_report = None
    if labels is not None:
        role = build_roles([labels.labeler])[labels.labeler.role]
        cache = StageCache(labels.cache or out / LABEL_CACHE)
        try:
            label_report = label_distribution(*tasks, labels.category, role, cache, labels.field_name,
                                              labels.workers, progress)
        finally:
            cache.close()
    report = DistributionReport(task_a, task_b, enc.fingerprint(), normalize, list(sets), aligned, label_report,
                                [REPORT_FILE, PLOT_FILE])
    out.mkdir(parents=True, exist_ok=True)
    title = f"{enc.fingerprint().get('encoder')} embeddings, {aligned.trials} trials of {aligned.n_per_trial} images\n"
    title += f"FID {aligned.fid.mean:.4f} ± {aligned.fid.std:.4f}; PCA-KL ({aligned.pca['dim_used']} dims): "
    title += f"A||B {aligned.kl_ab.mean:.4g}, B||A {aligned.kl_ba.mean:.4g}"
    write_bytes_atomic(out / PLOT_FILE, scatter_png(a, b, (f"A: {task_a}", f"B: {task_b}"), title))
    write_json_atomic(out / REPORT_FILE, report.to_json())
    return report
