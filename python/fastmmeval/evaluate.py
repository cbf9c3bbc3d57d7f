"""The evaluator loop: docs -> requests (prepared ahead in a pool) -> model -> scores -> samples."""

from __future__ import annotations

import math
import random
import subprocess
import sys
import time
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import Any

from tqdm import tqdm

import fastmmeval
from fastmmeval.answering import Answered, Prepared, answered, prepared_docs
from fastmmeval.distributed import ONE_PROCESS, Ranks
from fastmmeval.errors import ConfigError, DocError
from fastmmeval.judge.agreement import agreement
from fastmmeval.judge.judge import Judge, Verdict, from_described
from fastmmeval.judge.pipeline import JudgePanel, Judging, judge_calls, judged_score, needs_judge
from fastmmeval.metrics import overall_score, summarize
from fastmmeval.models import MODELS, Model, parse_model_args
from fastmmeval.models.base import add_usage
from fastmmeval.protocol import Response
from fastmmeval.results import RunDir
from fastmmeval.tasks import resolve
from fastmmeval.tasks.task import Task


def _sample(
    task: Task, item: Prepared, response: Response | None, verdicts: dict[str, list[Verdict]] | None = None
) -> dict[str, Any]:
    sample: dict[str, Any] = {"doc_id": item.ref.id, "doc_index": item.ref.index}
    if item.request is not None:
        sample["request_kind"] = item.request.kind
        sample["prompt"] = [{"role": m.role, "content": m.text} for m in item.request.messages]
        sample["images"] = [p.ref for m in item.request.messages for p in m.content if hasattr(p, "image")]
        if item.request.continuations:
            sample["continuations"] = list(item.request.continuations)
    if item.error is not None:
        return {**sample, "failed": item.error}
    assert response is not None and item.doc is not None
    if response.error is not None:
        return {**sample, "failed": f"{task.where(item.doc)}: model error: {response.error}"}
    sample["response"] = response.text
    if response.logprobs is not None:
        sample["logprobs"] = response.logprobs
        sample["is_greedy"] = response.is_greedy
    try:
        if verdicts is None:
            sample.update(task.score(item.doc, response))
        else:
            sample.update(judged_score(task, item.doc, response, verdicts))
    except DocError as e:
        return {**sample, "failed": str(e)}
    sample["failed"] = None
    return sample




MAX_JUDGING_BATCHES = 64  # inference waits for the judges when this many batches await judgment


def _judged_samples(task: Task, groups: Iterator[Answered], panel: JudgePanel) -> Iterator[list[dict[str, Any]]]:
    """Each group's samples, in order, once the judges have graded it: a group's answers go to the
    judges at once, and the model goes on with the next groups while they work."""
    pending: deque[tuple[Answered, Judging]] = deque()
    for group in groups:
        calls = []
        for item, response in group:
            if response is None or response.error is not None or item.doc is None:
                continue
            try:
                uses = judge_calls(task, item.doc, item.request, response)
            except DocError:
                continue  # _sample records the same error as the doc's failure
            calls.extend((item.ref.id, use, prompt, case) for use, prompt, case in uses)
        pending.append((group, panel.submit(calls)))
        while pending and (pending[0][1].done() or len(pending) > MAX_JUDGING_BATCHES):
            yield _finish_judged(task, *pending.popleft())
    while pending:
        yield _finish_judged(task, *pending.popleft())


def _finish_judged(task: Task, group: Answered, judging: Judging) -> list[dict[str, Any]]:
    verdicts = judging.result()
    return [_sample(task, item, response, verdicts.get(item.ref.id, {})) for item, response in group]


def run_task(
    model: Model,
    task: Task,
    run: RunDir,
    *,
    limit: int | None,
    batch_size: int,
    seed: int,
    workers: int = 2,
    progress: bool = True,
    bootstrap_iters: int = 1000,
    ranks: Ranks = ONE_PROCESS,
    judges: JudgePanel | None = None,
    retry_failed: bool = False,
) -> dict[str, Any]:
    """Evaluate one task, skipping docs whose samples the run already holds (except, with
    `retry_failed`, those whose model call failed); returns its results.
    With several ranks, each evaluates every world_size-th doc left and rank 0 writes all samples.
    A task with judge metrics or judge-assisted extraction is graded by `judges` as it goes."""
    if needs_judge(task) and (judges is None or ranks.world_size > 1):
        raise ConfigError(_judge_needed([task.name]))
    refs = task.doc_refs(limit)
    done = run.completed(task.name) if ranks.is_main else {}
    if retry_failed:  # the new sample is appended after the failed one and supersedes it
        done = {d: s for d, s in done.items() if _failure_kind(s.get("failed") or "") != "model error"}
    left = set(ranks.share([r.id for r in refs if r.id not in done] if ranks.is_main else None)[0])
    todo = [r for r in refs if r.id in left]
    mine = prepared_docs(model, task, todo[ranks.rank :: ranks.world_size], seed, workers, ahead=2 * batch_size + 2)
    groups = answered(model, mine, batch_size)
    show = progress and ranks.is_main
    with tqdm(total=len(refs), initial=len(refs) - len(todo), desc=task.name, unit="doc", disable=not show) as bar:
        if judges is not None and needs_judge(task):  # one process (checked above)
            for samples in _judged_samples(task, groups, judges):
                run.append(task.name, samples)
                done.update((s["doc_id"], s) for s in samples)
                bar.update(len(samples))
        else:
            # Every rank takes the same number of steps; a step's samples are a run of `todo`, in order.
            for _ in range(math.ceil(len(todo) / (ranks.world_size * batch_size))):
                gathered = ranks.share([_sample(task, item, response) for item, response in next(groups, [])])
                samples = [s for row in zip_longest(*gathered) for s in row if s is not None]
                if ranks.is_main:
                    run.append(task.name, samples)
                    done.update((s["doc_id"], s) for s in samples)
                bar.update(len(samples))
    results = aggregate(task, [done[r.id] for r in refs], bootstrap_iters, seed) if ranks.is_main else None
    return ranks.share(results)[0]


def _judge_needed(tasks: list[str]) -> str:
    return (f"task(s) {', '.join(tasks)} need a judge: pass --judge_model/--judge_args or --judge_config "
            "(judged tasks run in one process, without --num_processes)")


def _failure_kind(reason: str) -> str:
    for kind in ("unreadable image", "model error", "missing field", "missing image field", "missing target"):
        if kind in reason:
            return kind
    return "other"


def aggregate(
    task: Task, samples: list[dict[str, Any]], bootstrap_iters: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """Task results from its samples (in doc order): each metric with its stderr, counts of
    scored and failed docs, and which extraction rules decided the answers."""
    scored = [s for s in samples if s.get("failed") is None]
    failed = [s for s in samples if s.get("failed") is not None]
    out: dict[str, Any] = {
        "alias": task.name,
        "version": task.config.version,
        "fingerprint": task.fingerprint(),
        "output_type": task.config.output_type,
        "mc_mode": task.config.mc_mode,
        "n": len(samples),
        "n_scored": len(scored),
        "n_failed": len(failed),
        "failures": dict(Counter(_failure_kind(s["failed"]) for s in failed)),
        "extract_rules": dict(Counter(s["extract_rule"] for s in scored)),
        "headline_metric": task.config.metrics[0] if task.config.metrics else None,
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
    for metric in task.metrics:
        items = [v for s in scored if (v := s["metrics"][metric.name]) is not None]
        for name, v in summarize(metric, items, bootstrap_iters=bootstrap_iters, seed=seed).items():
            finite = {k: (x if x is not None and math.isfinite(x) else None) for k, x in v.items()}
            out["metrics"][name] = finite
            out[f"{name},none"] = finite["value"]  # lmms-eval's result keys
            out[f"{name}_stderr,none"] = finite["stderr"]
    return out


@dataclass
class RunConfig:
    """Everything that decides what a run computes (a resumed run must match it)."""

    model: str
    model_args: str = ""
    tasks: list[str] = field(default_factory=list)
    limit: int | None = None
    seed: int = 0
    include_path: list[str] = field(default_factory=list)
    bootstrap_iters: int = 1000
    judges: list[dict[str, Any]] = field(default_factory=list)


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0], "fastmmeval": fastmmeval.__version__}
    for name in ("torch", "transformers", "datasets", "numpy", "pillow"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    return out


def _git_hash() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
        import torch

        torch.manual_seed(seed)
    except ImportError:
        pass


def evaluate(
    config: RunConfig,
    *,
    output_path: Path,
    batch_size: int | None = None,
    resume: bool | Path = False,
    progress: bool = True,
    command: list[str] | None = None,
    ranks: Ranks = ONE_PROCESS,
    retry_failed: bool = False,
) -> tuple[RunDir, dict[str, Any]]:
    """Run `config` and write its run folder; with `resume`, continue the newest matching run
    under `output_path` (or the run folder given) instead of starting over, and with
    `retry_failed` also ask the model again for the docs whose call failed (`model error`: an API
    that gave up after its retries, a timeout). `batch_size` None: the
    model's own default. With several `ranks`
    (data parallel), every rank calls this: each evaluates a share of the docs, rank 0 writes the
    run folder, and all return its results; a failure on any rank fails all of them."""
    with ranks.guard():
        return _evaluate(config, output_path, batch_size, resume, progress, command, ranks, retry_failed)


def _evaluate(
    config: RunConfig,
    output_path: Path,
    batch_size: int | None,
    resume: bool | Path,
    progress: bool,
    command: list[str] | None,
    ranks: Ranks,
    retry_failed: bool,
) -> tuple[RunDir, dict[str, Any]]:
    tasks = resolve(config.tasks, config.include_path)
    for task in tasks:
        for metric in task.metrics:
            problem = metric.unavailable() if metric.unavailable else None
            if problem:
                raise ConfigError(f"task {task.name}: metric {metric.name} cannot run here: {problem}")
    model_cls = MODELS.get(config.model)
    model_args = parse_model_args(config.model_args)
    if ranks.is_main:
        run = _open_run(config, output_path, resume)
        fingerprints = {t.name: t.fingerprint() for t in tasks}  # loads (or builds) each task's data
        manifest = run.read_json("manifest.json")
        if manifest is not None and manifest["task_fingerprints"] != fingerprints:
            changed = [t for t in fingerprints if manifest["task_fingerprints"].get(t) != fingerprints[t]]
            raise ConfigError(f"{run.root}: task(s) {', '.join(changed)} changed since this run began; start a new run")
    _seed_everything(config.seed)
    judged = [t.name for t in tasks if needs_judge(t)]
    if judged and (not config.judges or ranks.world_size > 1):
        raise ConfigError(_judge_needed(judged))  # before any model time is spent
    model = model_cls.from_args(model_args)
    batch_size = batch_size or model.default_batch_size()
    panel = JudgePanel([Judge(s) for s in from_described(config.judges)]) if config.judges and ranks.is_main else None
    # Once every rank has its model, the others may read the data rank 0 has loaded (and built).
    run = RunDir(ranks.share(run.root if ranks.is_main else None)[0])
    if ranks.is_main:
        manifest = manifest or {
            "run_id": run.root.name,
            "config": asdict(config),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "command": command or [],
            "versions": _versions(),
            "git": _git_hash(),
            "model_fingerprint": model.fingerprint(),
            "judge_fingerprints": panel.fingerprints() if panel is not None else {},
            "task_fingerprints": fingerprints,
            "resumed": [],
        }
        if resume and (run.root / "samples").exists():
            manifest["resumed"].append(time.strftime("%Y-%m-%dT%H:%M:%S"))
        run.write_json("manifest.json", manifest)
    results: dict[str, Any] = {}
    earlier = (run.read_json("results.json") or {}) if ranks.is_main else {}
    for task in tasks:
        results[task.name] = run_task(
            model,
            task,
            run,
            limit=config.limit,
            batch_size=batch_size,
            seed=config.seed,
            progress=progress,
            bootstrap_iters=config.bootstrap_iters,
            ranks=ranks,
            judges=panel,
            retry_failed=retry_failed,
        )
        if ranks.is_main:
            summary: dict[str, Any] = {"results": results, "config": asdict(config), "run_id": run.root.name}
            if len(tasks) > 1 and len(results) == len(tasks):
                summary["overall"] = overall_score(results)  # equal-weight mean of headline metrics on 0-100
            if usage := add_usage(earlier.get("usage", {}), model.usage()):
                summary["usage"] = usage  # a resumed run's calls added to those before it
            if panel is not None and (judge_usage := panel.usage()):
                summary["judge_usage"] = judge_usage
            run.write_json("results.json", summary)
    if panel is not None:
        panel.close()
    if ranks.is_main:
        manifest["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        run.write_json("manifest.json", manifest)
    ranks.share(None)  # a failure on rank 0 while writing still stops every rank
    return run, results


def _open_run(config: RunConfig, output_path: Path, resume: bool | Path) -> RunDir:
    if isinstance(resume, Path):
        run = RunDir(resume)
        manifest = run.read_json("manifest.json")
        if manifest is None:
            raise ConfigError(f"--resume {resume}: no manifest.json there (not a run folder)")
        if manifest.get("config") != asdict(config):
            raise ConfigError(f"--resume {resume}: that run was started with other settings: {manifest.get('config')}")
        return run
    if resume:
        found = RunDir.find_resumable(output_path, asdict(config))
        if found is not None:
            return found
    return RunDir.create(output_path, config.model)
