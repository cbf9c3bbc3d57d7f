"""Stage 8: the new version `<task>_live_v<N>` of a benchmark, from its verified items: balanced per atomic
task like the original, written in the original's schema and feature types plus provenance columns as
`<split>.parquet`, a `save_to_disk` copy in `hf/`, the task file `<task>_live_v<N>.yaml` (the original's
protocol over these rows: CircularEval for MMBench) and `manifest.json`. The same inputs give the same bytes.

For a CircularEval task (MMBench) each question is written with its rotations, as the original's dev
split holds them: question i at index i, rotation k at i + k * 1,000,000 with its options turned k places
and the answer letter moved with them."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from fastmmeval.errors import ConfigError
from fastmmeval.evolve.benchmark import Benchmark, blank
from fastmmeval.evolve.records import Candidate, Generated, Verified
from fastmmeval.extract.rules import LETTERS
from fastmmeval.live.dataset import write_export
from fastmmeval.live.store import Blobs, content_key
from fastmmeval.metrics.circular import ROTATION_STRIDE

# The provenance columns after the original's: where the image came from and how its item was made and checked.
PROVENANCE = (
    "image_sha256", "image_url", "page_url", "uploaded_at", "image_source", "query", "generator", "verifier",
    "verifier_answer", "plan", "observations",
)  # fmt: skip


def version_task_name(task: str, version: int) -> str:
    """The task name of version `version` (1, 2, ...) of `task`: "mmbench_en_dev_live_v1"."""
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ConfigError(f"evolve: a version is a whole number from 1, got {version!r}")
    return f"{task}_live_v{version}"


@dataclass(frozen=True)
class _Item:
    """An accepted item as exported: its generated instance, its verification and its image."""

    generated: Generated
    verified: Verified
    candidate: Candidate

    @property
    def key(self) -> tuple[str, str, str]:
        """Its place in the export, whatever order the items came in: task, image, content."""
        return self.generated.atomic, self.candidate.sha, content_key(self.generated.record())


def _items(benchmark: Benchmark, accepted: Sequence[tuple[Verified, Candidate]]) -> tuple[list[_Item], list[dict]]:
    """The items that can be exported, sorted, and the others with their reason. A pair that is not an
    accepted verification of its own candidate is a ConfigError."""
    items: list[_Item] = []
    for verified, candidate in accepted:
        generated = Generated.from_record(verified.generated)
        if not verified.accepted:
            raise ConfigError(f"evolve export: item {candidate.sha}: its verification rejected it ({verified.reason})")
        if generated.sha != candidate.sha:
            raise ConfigError(f"evolve export: item {generated.sha} is paired with candidate {candidate.sha}")
        items.append(_Item(generated, verified, candidate))
    items.sort(key=lambda i: i.key)
    known, most = set(benchmark.atomic_tasks()), len(benchmark.layout.options)
    kept, dropped, seen = [], [], set()
    for item in items:
        g = item.generated
        n = len(g.options)
        if g.atomic not in known:
            reason = f"atomic task {g.atomic!r} is not one of {benchmark.task}'s"
        elif not 2 <= n <= most or any(blank(o) for o in g.options):
            reason = f"{n} options: {benchmark.task} holds 2 to {most} non-empty options"
        elif g.answer not in LETTERS[:n]:
            reason = f"answer {g.answer!r} is not one of its {n} option letters"
        elif g.sha in seen:
            reason = "its image is already another exported item's"
        else:
            seen.add(g.sha)
            kept.append(item)
            continue
        dropped.append({"item": g.sha, "atomic": g.atomic, "reason": reason})
    return kept, dropped


def _quotas(original: Mapping[str, int], available: Mapping[str, int], per_task: int | None) -> dict[str, int]:
    """How many items each atomic task with items gets: `per_task` each (fewer where fewer are there), or
    the original's proportions of distinct questions scaled to what the scarcest task allows (at least one)."""
    present = {t: n for t, n in available.items() if n}
    if per_task is not None:
        return {t: min(per_task, n) for t, n in present.items()}
    if not present:
        return {}
    scale = min(Fraction(n, original[t]) for t, n in present.items())
    return {t: min(n, max(1, math.floor(scale * original[t]))) for t, n in present.items()}


def _cast(value: Any, feature: Any) -> Any:
    """`value` as a column of `feature` holds it (a string, a whole number, ...)."""
    import datasets

    if value is None or not isinstance(feature, datasets.Value):
        return value
    dtype = feature.dtype
    if dtype in ("string", "large_string"):
        return str(value)
    if dtype.startswith(("int", "uint")):
        return int(value)
    if dtype.startswith("float"):
        return float(value)
    return value


def _constants(benchmark: Benchmark) -> dict[str, Any]:
    """The original's text and number columns that hold one value in every row (MMBench dev's `split`),
    which the new rows keep."""
    import datasets

    out = {}
    for name, feature in benchmark.features.items():
        if isinstance(feature, datasets.Value) and len(benchmark.rows):
            values = set(benchmark.column(name))
            if len(values) == 1:
                out[name] = values.pop()
    return out


def _rows(benchmark: Benchmark, items: Sequence[_Item], blobs: Blobs) -> list[dict[str, Any]]:
    """The rows of `items` in the original's schema, question i numbered i, plus its rotations for a
    CircularEval task; sorted by index."""
    import datasets

    layout, features = benchmark.layout, benchmark.features
    constants = {**_constants(benchmark), **dict(benchmark.config.where)}
    rows = []
    for i, item in enumerate(items):
        g, c, v = item.generated, item.candidate, item.verified
        image = {"bytes": blobs.get(c.sha, c.suffix), "path": None}
        if isinstance(features[layout.image], (datasets.Sequence, list)):
            image = [image]
        provenance = {
            "image_sha256": c.sha, "image_url": c.url, "page_url": c.page_url, "uploaded_at": c.uploaded_at,
            "image_source": c.source, "query": c.query, "generator": g.generator, "verifier": v.verifier,
            "verifier_answer": v.verifier_answer, "plan": json.dumps(g.plan, ensure_ascii=False, sort_keys=True),
            "observations": json.dumps(v.observations, ensure_ascii=False),
        }  # fmt: skip
        n, answer = len(g.options), LETTERS.index(g.answer)
        for k in range(n if benchmark.circular else 1):
            options = g.options[k:] + g.options[:k]
            letter = LETTERS[(answer - k) % n]
            row = {name: constants.get(name) for name in features}
            row.update({
                layout.index: i + k * ROTATION_STRIDE, layout.atomic: g.atomic, layout.question: g.question,
                layout.answer: _answer(letter, features[layout.answer]), layout.image: image,
                **{name: (options[j] if j < n else None) for j, name in enumerate(layout.options)},
            })  # fmt: skip
            if layout.ability is not None:
                row[layout.ability] = benchmark.ability(g.atomic)
            if layout.hint is not None:
                row[layout.hint] = g.hint or None
            if layout.source is not None:
                row[layout.source] = c.source
            rows.append({name: _cast(value, features.get(name)) for name, value in row.items()} | provenance)
    return sorted(rows, key=lambda r: r[layout.index])


def _answer(letter: str, feature: Any) -> Any:
    """The answer as the original's answer column holds it: the letter, or the option's index in a
    column of whole numbers."""
    import datasets

    if isinstance(feature, datasets.Value) and feature.dtype.startswith(("int", "uint")):
        return LETTERS.index(letter)
    return letter


def version_features(benchmark: Benchmark) -> Any:
    """The new version's features: the original's, then the provenance columns (text)."""
    import datasets

    original = benchmark.features
    taken = sorted(set(PROVENANCE) & set(original))
    if taken:
        raise ConfigError(f"task {benchmark.task}: its column {taken[0]!r} has the name of a provenance column")
    return datasets.Features({**original, **{name: datasets.Value("string") for name in PROVENANCE}})


def version_task_file(benchmark: Benchmark, version: int, docs: int) -> str:
    """The YAML text of the new version's task: the original's protocol (`extends`), its dataset replaced by
    `<split>.parquet` beside the file, `docs` rows; not in the original's groups, and no lmms-eval task of
    its own."""
    config = benchmark.config
    name = version_task_name(benchmark.task, version)
    inherited = [k for k, v in asdict(config.dataset).items() if v not in (None, False) and k != "base_dir"]
    dropped = ", ".join(f"{k}: null" for k in inherited if k != "data_files")
    files = f"data_files: {{{json.dumps(config.split)}: {json.dumps(_data_file(config))}}}"
    dataset = f"{{{dropped}, {files}}}" if dropped else f"{{{files}}}"
    description = (
        f"{benchmark.task} live v{version}, built with fastmmeval evolve: new images and verified questions of the "
        f"same atomic tasks and option counts, asked and scored with {benchmark.task}'s protocol."
    )
    lines = [
        f"task: {name}",
        f"extends: {benchmark.task}",
        f"description: {json.dumps(description)}",
        "group: null",
        "lmms_eval: null",
        f"dataset: {dataset}",
        f"docs: {docs}",
    ]
    return "\n".join(lines) + "\n"


def _data_file(config: Any) -> str:
    return f"{config.split}.parquet"


def export_version(
    benchmark: Benchmark,
    accepted: Sequence[tuple[Verified, Candidate]],
    blobs: Blobs,
    out: Path,
    version: int,
    *,
    per_task: int | None = None,
    seed: int = 0,
    manifest: dict[str, Any],
) -> Path:
    """Write version `version` of `benchmark` into `out` from the `accepted` items (each verification
    with its candidate; images in `blobs`): per atomic task the original's proportions of distinct
    questions scaled to the scarcest task, or `per_task` each (fewer where fewer were accepted), picked
    with `seed`. `manifest` (the stages' counts, models, prompts, tokens, cost, times) goes into
    manifest.json with the export's counts and every accepted item not exported with its reason. `out`
    must be new, empty or an earlier export. Returns `out`."""
    import datasets

    name = version_task_name(benchmark.task, version)
    if per_task is not None and (isinstance(per_task, bool) or not isinstance(per_task, int) or per_task < 1):
        raise ConfigError(f"evolve export: per_task is a whole number from 1, got {per_task!r}")
    features = version_features(benchmark)
    items, dropped = _items(benchmark, accepted)
    by_task: dict[str, list[_Item]] = {}
    for item in items:
        by_task.setdefault(item.generated.atomic, []).append(item)
    original = benchmark.counts()
    quotas = _quotas(original, {t: len(v) for t, v in by_task.items()}, per_task)
    chosen: list[_Item] = []
    summary: dict[str, dict[str, int]] = {}
    for atomic in sorted(by_task):
        pool, quota = by_task[atomic], quotas[atomic]
        taken = set(random.Random(f"{seed}/{atomic}").sample(range(len(pool)), quota))
        picked = [item for k, item in enumerate(pool) if k in taken]  # pool is sorted: so is picked
        reason = f"balance: {atomic} takes {quota} of its {len(pool)}"
        dropped += [{"item": i.generated.sha, "atomic": atomic, "reason": reason}
                    for k, i in enumerate(pool) if k not in taken]  # fmt: skip
        chosen += picked
        summary[atomic] = {"original": original[atomic], "accepted": len(pool), "wanted": per_task or quota,
                           "exported": quota}  # fmt: skip
    if not chosen:
        raise ConfigError(
            f"evolve export: none of the {len(accepted)} accepted items of {benchmark.task} can be exported"
        )
    rows = _rows(benchmark, chosen, blobs)
    data = datasets.Dataset.from_list(rows, features=features)
    export = {
        "task": name,
        "original": benchmark.task,
        "version": version,
        "split": benchmark.config.split,
        "policy": "per_task" if per_task is not None else "proportional",
        "per_task": per_task,
        "seed": seed,
        "layout": asdict(benchmark.layout),
        "accepted": len(accepted),
        "questions": len(chosen),
        "rows": len(rows),
        "by_task": summary,
        "short": sorted(t for t, s in summary.items() if s["exported"] < s["wanted"]),
        "tasks_without_items": sorted(set(original) - set(summary)),
        "not_exported": sorted(dropped, key=lambda d: (d["atomic"], d["item"], d["reason"])),
    }
    task_file = version_task_file(benchmark, version, len(rows)).encode("utf-8")
    files = {f"{name}.yaml": task_file}
    what = "an evolve version's export"
    return write_export(out, data, _data_file(benchmark.config), manifest, export, what, files)
