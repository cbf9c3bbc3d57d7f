"""Comparison of runs: per task, the difference of the headline metric with a paired test on the docs both
runs scored, refused where the tasks' protocols (fingerprints) differ.

Values are on the 0-100 scale when the headline metric's `to_100` is affine (percent, already on 0-100),
the scale the overall score uses (`metrics.aggregate`); otherwise on the metric's own scale (`scale` says
which). `diff` is the other run minus the baseline. Docs are paired by doc id; a metric with a `cluster`
(MMBench's CircularEval) is paired per cluster, each cluster's value its `aggregate` over the shared docs
(for CircularEval: 1 when every rotation is right). 0/1 values are tested with McNemar, others with the
paired bootstrap. A metric whose aggregate is not a mean of per-doc (or per-cluster) values (CIDEr, POPE's
F1, ...) is not tested: its entry says why.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastmmeval.errors import ConfigError
from fastmmeval.metrics import METRICS, Metric
from fastmmeval.report.stats import PairedTest, mcnemar, paired_bootstrap
from fastmmeval.results import RunDir
from fastmmeval.tasks import families as _families  # noqa: F401  (registers the benchmarks' metrics)

PREDATES = "fingerprints differ (this run predates recorded protocols)"


def compare_runs(
    runs: Sequence[Path], *, allow_mismatch: bool = False, bootstrap_iters: int = 10000, seed: int = 0
) -> dict[str, Any]:
    """{"baseline": the first run, "comparisons": one entry per other run and task both ran (see
    `compare_task`), "unmatched": {other run: {"only_baseline": tasks, "only_other": tasks}}, "warnings":
    lines}. Tasks whose fingerprints differ raise ConfigError naming the fields, unless `allow_mismatch`,
    where the entry is kept with `mismatch` filled and a warning."""
    if len(runs) < 2:
        raise ConfigError(f"compare_runs: needs two or more run folders, got {len(runs)}")
    baseline, *others = [Path(r) for r in runs]
    base_results = _results(baseline)
    out: dict[str, Any] = {"baseline": str(baseline), "comparisons": [], "unmatched": {}, "warnings": []}
    for other in others:
        other_results = _results(other)
        shared = [t for t in base_results if t in other_results]
        out["unmatched"][str(other)] = {
            "only_baseline": [t for t in base_results if t not in other_results],
            "only_other": [t for t in other_results if t not in base_results],
        }
        for task in shared:
            mismatch = protocol_mismatch(base_results[task], other_results[task])
            if mismatch is not None:
                line = f"task {task}: {baseline} and {other}: {mismatch['reason']}"
                if not allow_mismatch:
                    raise ConfigError(f"{line}; not comparable (allow_mismatch compares them anyway)")
                out["warnings"].append(f"{line}; compared anyway (allow_mismatch)")
            entry = compare_task(
                task,
                (baseline, base_results[task]),
                (other, other_results[task]),
                bootstrap_iters=bootstrap_iters,
                seed=seed,
            )
            out["comparisons"].append({**entry, "mismatch": mismatch})
    return out


def compare_task(
    task: str,
    baseline: tuple[Path, dict[str, Any]],
    other: tuple[Path, dict[str, Any]],
    *,
    bootstrap_iters: int = 10000,
    seed: int = 0,
) -> dict[str, Any]:
    """One task of two runs, each (run folder, its results.json entry): {task, baseline, other, metric,
    scale, n_shared (units paired), n_shared_docs, n_only_baseline, n_only_other (docs scored by one run
    only), n_failed_baseline, n_failed_other (failed or unscored docs), value_a, value_b, diff, ci [low,
    high], p_value, test, significant, verdict ("significant", "not significant" or "not tested"), reason
    (why not tested, else None), b01, b10 (McNemar's discordant counts)}."""
    (run_a, result_a), (run_b, result_b) = baseline, other
    entry: dict[str, Any] = {"task": task, "baseline": str(run_a), "other": str(run_b)}
    name, key = result_a.get("headline_metric"), result_a.get("headline_as")
    metric = METRICS.get(name) if name in METRICS else None
    values_a, failed_a = _doc_values(run_a, task, key)
    values_b, failed_b = _doc_values(run_b, task, key)
    shared = [d for d in values_a if d in values_b]
    entry.update(
        metric=key,
        n_shared_docs=len(shared),
        n_only_baseline=len(values_a) - len(shared),
        n_only_other=len(values_b) - len(shared),
        n_failed_baseline=failed_a,
        n_failed_other=failed_b,
    )
    slope, offset = _affine_100(metric)
    entry["scale"] = "0-100" if slope is not None else "metric"
    slope, offset = (1.0, 0.0) if slope is None else (slope, offset)
    reason = _untestable(metric, name)
    if result_b.get("headline_as") != key:
        reason = f"the runs' headline metrics differ: {key} vs {result_b.get('headline_as')}"
    units = [] if reason else _units(metric, [values_a[d] for d in shared], [values_b[d] for d in shared])
    if not reason and not units:
        reason = "no doc scored by both runs"
    if reason:
        return {
            **entry,
            "n_shared": len(units),
            "value_a": None,
            "value_b": None,
            "diff": None,
            "ci": None,
            "p_value": None,
            "test": None,
            "significant": False,
            "verdict": "not tested",
            "reason": reason,
            "b01": None,
            "b10": None,
        }
    a, b = [u[0] for u in units], [u[1] for u in units]
    binary = all(v in (0.0, 1.0) for v in a + b)
    result: PairedTest = mcnemar(a, b) if binary else paired_bootstrap(a, b, iters=bootstrap_iters, seed=seed)
    return {
        **entry,
        "n_shared": result.n,
        "value_a": offset + slope * result.mean_a,
        "value_b": offset + slope * result.mean_b,
        "diff": slope * result.diff,
        "ci": [slope * result.ci_low, slope * result.ci_high],
        "p_value": result.p_value,
        "test": result.test,
        "significant": result.significant,
        "verdict": "significant" if result.significant else "not significant",
        "reason": None,
        "b01": result.b01,
        "b10": result.b10,
    }


def protocol_mismatch(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    """None when two results.json task entries have the same fingerprint; else {"fingerprints": [a, b],
    "fields": the dotted protocol fields that differ, "reason": one line saying so}."""
    fa, fb = a.get("fingerprint"), b.get("fingerprint")
    if fa == fb:
        return None
    pa, pb = a.get("protocol"), b.get("protocol")
    if not isinstance(pa, dict) or not isinstance(pb, dict):
        fields: list[str] = []
        reason = f"{PREDATES}: {fa} vs {fb}"
    else:
        flat_a, flat_b = flatten(pa), flatten(pb)
        fields = sorted(k for k in flat_a.keys() | flat_b.keys() if flat_a.get(k, _ABSENT) != flat_b.get(k, _ABSENT))
        what = ", ".join(fields) if fields else "nothing recorded (the recorded protocols agree)"
        reason = f"fingerprints differ: {fa} vs {fb}; protocol field(s) that differ: {what}"
    return {"fingerprints": [fa, fb], "fields": fields, "reason": reason}


_ABSENT = object()


def flatten(payload: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one mapping of dotted paths (`generation.max_new_tokens`); lists are leaves."""
    out: dict[str, Any] = {}
    for key, value in payload.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


def terminal_lines(run: Path, other: Path) -> list[str]:
    """One line per task `run` shares with `other` (the reference, e.g. `--compare RUN_DIR`): the
    reference's value -> this run's, the difference with its interval, the test, its verdict and n.
    Tasks whose protocols differ are listed with the differing fields instead of refused."""
    result = compare_runs([other, run], allow_mismatch=True)
    entries = result["comparisons"]
    width = max((len(e["task"]) for e in entries), default=0)
    lines = []
    for e in entries:
        head = e["task"].ljust(width)
        if e["mismatch"] is not None:
            fields = ", ".join(e["mismatch"]["fields"]) or e["mismatch"]["reason"]
            lines.append(f"{head}  not compared: protocol differs ({fields})")
        elif e["test"] is None:
            lines.append(f"{head}  not tested: {e['reason']}")
        else:
            test = "McNemar" if e["test"].startswith("mcnemar") else "bootstrap"
            low, high = e["ci"]
            lines.append(
                f"{head}  {e['value_a']:.2f} -> {e['value_b']:.2f}  {e['diff']:+.2f} [{low:.1f}, {high:.1f}]  "
                f"{test} p={_p(e['p_value'])}  {e['verdict']} (n={e['n_shared']})"
            )
    return lines


def _p(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.2g}"


def _results(run: Path) -> dict[str, dict[str, Any]]:
    path = run / "results.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: cannot read the run's results ({e})") from None
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, dict):
        raise ConfigError(f"{path}: no `results` mapping")
    return results


def _doc_values(run: Path, task: str, key: str | None) -> tuple[dict[str, Any], int]:
    """The headline metric's item of each doc the run scored, by doc id, and how many docs failed or have
    no item (a failed judgment)."""
    values: dict[str, Any] = {}
    failed = 0
    for doc_id, sample in RunDir(run).completed(task, repair=False).items():
        value = None if sample.get("failed") is not None else (sample.get("metrics") or {}).get(key)
        if value is None:
            failed += 1
        else:
            values[doc_id] = value
    return values, failed


def _untestable(metric: Metric | None, name: str | None) -> str | None:
    if metric is None:
        return f"unknown headline metric {name!r}"
    if metric.cluster is None and metric.stderr != "analytic":
        return f"metric {name}'s aggregate is not a mean of per-doc values"
    return None


def _units(metric: Metric | None, a: list[Any], b: list[Any]) -> list[tuple[float, float]]:
    """The paired values: one per doc, or per cluster (its aggregate over the cluster's shared docs)."""
    assert metric is not None
    if metric.cluster is None:
        return [(float(x), float(y)) for x, y in zip(a, b, strict=True)]
    groups: dict[Any, tuple[list[Any], list[Any]]] = {}
    for x, y in zip(a, b, strict=True):
        group = groups.setdefault(json.dumps(x[metric.cluster]), ([], []))
        group[0].append(x)
        group[1].append(y)
    return [(float(metric.aggregate(xs)), float(metric.aggregate(ys))) for xs, ys in groups.values()]


def _affine_100(metric: Metric | None) -> tuple[float | None, float]:
    """(slope, offset) of the metric's `to_100` when it is affine on [0, 1] (None: not, or none)."""
    if metric is None or metric.to_100 is None:
        return None, 0.0
    f = metric.to_100
    lo, hi = f(0.0), f(1.0)
    tolerance = 1e-9 * max(1.0, abs(hi))
    if any(abs(f(x) - (lo + x * (hi - lo))) > tolerance for x in (0.25, 0.5, 0.75)):
        return None, 0.0
    return hi - lo, lo
