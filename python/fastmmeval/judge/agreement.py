"""Agreement between judges that graded the same docs: Cohen's kappa for labels (two judges),
Krippendorff's alpha for ratings or labels (any number of judges, missing verdicts allowed)."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from fastmmeval.errors import ConfigError
from fastmmeval.judge.prompts import PROMPTS
from fastmmeval.results import RunDir


def cohen_kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    """Cohen's kappa of two raters' labels on the same items (nan when chance agreement is 1,
    e.g. both raters always give the same single label)."""
    if len(a) != len(b) or not a:
        raise ValueError("cohen_kappa needs two equally long, non-empty label lists")
    n = len(a)
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    count_a, count_b = Counter(a), Counter(b)
    expected = sum(count_a[label] * count_b[label] for label in count_a) / (n * n)
    if expected == 1.0:
        return float("nan")
    return (observed - expected) / (1.0 - expected)


def krippendorff_alpha(
    reliability: Sequence[Sequence[Any]], level: Literal["interval", "nominal"] = "interval"
) -> float:
    """Krippendorff's alpha of a raters x items table (None = no value); items with fewer than
    two values are not pairable and are left out. nan when there is no disagreement to expect."""
    units = [[v for v in column if v is not None] for column in zip(*reliability, strict=True)]
    units = [u for u in units if len(u) >= 2]
    n = sum(len(u) for u in units)
    if n < 2:
        return float("nan")

    def delta(x: Any, y: Any) -> float:
        return float(x != y) if level == "nominal" else (float(x) - float(y)) ** 2

    observed = sum(
        sum(delta(x, y) for x, y in itertools.permutations(u, 2)) / (len(u) - 1) for u in units
    ) / n
    counts = Counter(v for u in units for v in u)
    expected = sum(counts[x] * counts[y] * delta(x, y) for x, y in itertools.product(counts, repeat=2)) / (n * (n - 1))
    if expected == 0.0:
        return float("nan")
    return 1.0 - observed / expected


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def agreement(samples: Sequence[Mapping[str, Any]], judges: Sequence[str] | None = None) -> dict[str, Any]:
    """Per judged use (a judge metric, or `extract`): how far the judges agree on a task's
    samples: {"prompt", "level", "judges", "n_items" (docs every judge graded), "krippendorff_alpha",
    and for labels "cohen_kappa" per pair "a|b"}. Only uses graded by two judges or more appear."""
    uses: dict[str, dict[str, dict[str, Any]]] = {}
    for s in samples:
        for use, by_judge in (s.get("judgments") or {}).items():
            for judge, record in by_judge.items():
                uses.setdefault(use, {}).setdefault(judge, {})[s["doc_id"]] = record
    out: dict[str, Any] = {}
    for use, by_judge in sorted(uses.items()):
        names = [j for j in (judges or by_judge) if j in by_judge]
        if len(names) < 2:
            continue
        prompt = PROMPTS.get(next(iter(by_judge[names[0]].values()))["prompt"].split("@")[0])
        docs = sorted({d for j in names for d in by_judge[j]})

        def value(judge: str, doc: str, prompt: Any = prompt, by_judge: Any = by_judge) -> Any:
            record = by_judge[judge].get(doc)
            return None if record is None or record["error"] is not None else prompt.agreement_value(record["value"])

        table = [[value(j, d) for d in docs] for j in names]
        entry: dict[str, Any] = {
            "prompt": prompt.id,
            "level": prompt.level,
            "judges": names,
            "n_items": sum(all(row[i] is not None for row in table) for i in range(len(docs))),
            "krippendorff_alpha": _finite(krippendorff_alpha(table, prompt.level)),
        }
        if prompt.level == "nominal":
            kappas = {}
            for (i, a), (k, b) in itertools.combinations(enumerate(names), 2):
                both = [(x, y) for x, y in zip(table[i], table[k], strict=True) if x is not None and y is not None]
                kappas[f"{a}|{b}"] = _finite(cohen_kappa(*zip(*both, strict=True))) if both else None
            entry["cohen_kappa"] = kappas
        out[use] = entry
    return out


def run_agreement(run: Path, judges: list[str] | None = None, tasks: list[str] | None = None) -> dict[str, Any]:
    """{task: {use: agreement entry}} for the run's judged tasks (see `agreement`)."""
    folder = RunDir(run)
    if not folder.samples_dir.is_dir():
        raise ConfigError(f"{run}: no samples/ folder (not a run folder)")
    names = tasks or sorted(p.stem for p in folder.samples_dir.glob("*.jsonl"))
    out = {}
    for task in names:
        samples = [s for s in folder.completed(task).values() if s.get("failed") is None]
        found = agreement(samples, judges)
        if found:
            out[task] = found
    return out
