"""Samples and task results: one sample per doc (the prompt as the model saw it, the response, what was
extracted and scored, or why the doc failed: `failed` says it in one line, `failure_kind` names its
kind), and a task's results aggregated from its samples."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from fastmmeval.answering import Prepared
from fastmmeval.errors import DocError, FailureKind
from fastmmeval.judge.agreement import agreement
from fastmmeval.judge.judge import Verdict
from fastmmeval.judge.pipeline import judged_score, needs_judge
from fastmmeval.metrics import summarize
from fastmmeval.metrics.base import units
from fastmmeval.protocol import Response
from fastmmeval.tasks.config import protocol_json
from fastmmeval.tasks.task import DocRef, Task


def build_sample(
    task: Task, item: Prepared, response: Response | None, verdicts: dict[str, list[Verdict]] | None = None
) -> dict[str, Any]:
    """The sample of one doc: its request and response scored (through the judges' `verdicts` when the
    task is judged), or the failure that stopped it."""
    sample: dict[str, Any] = {"doc_id": item.ref.id, "doc_index": item.ref.index}
    if item.request is not None:
        sample["request_kind"] = item.request.kind
        sample["prompt"] = [{"role": m.role, "content": m.text} for m in item.request.messages]
        sample["images"] = [p.ref for m in item.request.messages for p in m.content if hasattr(p, "image")]
        if item.request.continuations:
            sample["continuations"] = list(item.request.continuations)
    if item.doc is not None and task.config.breakdown:
        sample["categories"] = task.categories(item.doc)
    if item.error is not None:
        return _failed(sample, item.error)
    assert response is not None and item.doc is not None
    if response.error is not None:
        error = DocError(f"{task.where(item.doc)}: model error: {response.error}", FailureKind.MODEL_ERROR)
        return _failed(sample, error)
    sample["response"] = response.text
    if response.logprobs is not None:
        sample["logprobs"] = response.logprobs
        sample["is_greedy"] = response.is_greedy
    try:
        if not task.metrics:  # predict only, or a submission task
            sample.update(task.predict(item.doc, response))
        elif verdicts is None:
            sample.update(task.score(item.doc, response))
        else:
            sample.update(judged_score(task, item.doc, response, verdicts))
    except DocError as e:
        return _failed(sample, e)
    sample["failed"] = None
    return sample


def _failed(sample: dict[str, Any], error: DocError) -> dict[str, Any]:
    return {**sample, "failed": str(error), "failure_kind": error.kind.value}


def failure_kind(sample: dict[str, Any]) -> FailureKind | None:
    """Why the sample's doc failed (None when it was scored). Samples written before kinds were
    recorded count as OTHER."""
    if sample.get("failed") is None:
        return None
    return FailureKind(sample.get("failure_kind", FailureKind.OTHER.value))


def aggregate(task: Task, samples: list[dict[str, Any]], bootstrap_iters: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Task results from its samples (in doc order): each metric with its stderr, counts of
    scored and failed docs (by failure kind), and which extraction rules decided the answers."""
    scored = [s for s in samples if s.get("failed") is None]
    failed = [s for s in samples if s.get("failed") is not None]
    out: dict[str, Any] = {
        "alias": task.name,
        "version": task.config.version,
        "fingerprint": task.fingerprint(),
        "protocol": protocol_json(task.protocol()),  # what the fingerprint hashes: comparisons name what differs
        "output_type": task.config.output_type,
        "mc_mode": task.config.mc_mode,
        "n": len(samples),
        "n_scored": len(scored),
        "n_failed": len(failed),
        "failures": dict(Counter(failure_kind(s).value for s in failed)),  # type: ignore[union-attr]
        "extract_rules": dict(Counter(s["extract_rule"] for s in scored)),
        "headline_metric": task.headline_metric,
        "headline_as": task.metrics[0].name if task.metrics else None,
        "metrics": {},
    }
    judged = [s for s in scored if s.get("judgments")]
    if judged or needs_judge(task):
        uses = sorted({use for s in judged for use in s["judgments"]})
        out["failed_judgments"] = {
            use: sum(1 for s in judged if next(iter(s["judgments"].get(use, {}).values()), {}).get("error"))
            for use in uses
        }
        asked = {use: sum(1 for s in judged if use in s["judgments"]) for use in uses}
        out["n_judged"] = {use: asked[use] - out["failed_judgments"][use] for use in uses}
        out["judge_agreement"] = agreement(judged)
    if not task.metrics:  # predicted, not scored
        return out
    out["metrics"], keys = _scores(task, scored, bootstrap_iters, seed)
    out.update(keys)
    if task.config.breakdown:
        out["breakdowns"] = _breakdowns(task, scored, bootstrap_iters, seed)
    return out


def _scores(
    task: Task, scored: list[dict[str, Any]], bootstrap_iters: int, seed: int
) -> tuple[dict[str, dict[str, float | None]], dict[str, float | None]]:
    """Each metric's values over the scored samples: {name: {"value", "stderr"}} on the metric's own scale
    (which `headline` maps to 0-100), and lmms-eval's result keys (`name,filter`, `name_stderr,filter`) on
    the task's scale."""
    metrics: dict[str, dict[str, float | None]] = {}
    keys: dict[str, float | None] = {}
    for metric, filter_name, scale in zip(task.metrics, task.metric_filters, task.metric_scales, strict=True):
        items = [v for s in scored if (v := s["metrics"][metric.name]) is not None]
        for name, v in summarize(metric, items, bootstrap_iters=bootstrap_iters, seed=seed).items():
            finite = {k: (x if x is not None and math.isfinite(x) else None) for k, x in v.items()}
            metrics[name] = finite
            keys[f"{name},{filter_name}"] = None if finite["value"] is None else finite["value"] * scale
            keys[f"{name}_stderr,{filter_name}"] = None if finite["stderr"] is None else finite["stderr"] * scale
    return metrics, keys


def _breakdowns(
    task: Task, scored: list[dict[str, Any]], bootstrap_iters: int, seed: int
) -> dict[str, dict[str, dict[str, Any]]]:
    """{field: {category: {lmms-eval key: value, ..., "n"}}} for each `breakdown` field, categories in name
    order: the task's metrics over that category's samples only (stderrs bootstrapped with the same seed,
    over whole clusters where a metric names them), and `n`, how many independent units the headline
    metric scored there (docs, or clusters such as MMBench's questions)."""
    categories = [_categories(task, s) for s in scored]
    headline = task.metrics[0]
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name in task.config.breakdown:
        groups: dict[str, list[dict[str, Any]]] = {}
        for sample, found in zip(scored, categories, strict=True):
            groups.setdefault(found[name], []).append(sample)
        out[name] = {}
        for category in sorted(groups):
            members = groups[category]
            items = [v for s in members if (v := s["metrics"][headline.name]) is not None]
            out[name][category] = {**_scores(task, members, bootstrap_iters, seed)[1], "n": units(headline, items)}
    return out


def _categories(task: Task, sample: dict[str, Any]) -> dict[str, str]:
    """A scored sample's categories: those it recorded, or (a sample written before the task file declared
    them) its doc's, read again."""
    recorded = sample.get("categories") or {}
    if all(name in recorded for name in task.config.breakdown):
        return recorded
    return task.categories(task.doc(DocRef(sample["doc_index"], sample["doc_id"])))
