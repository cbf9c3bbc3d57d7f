"""The evaluator loop: docs -> requests (prepared ahead in a pool) -> model -> scores -> samples."""

from __future__ import annotations

import math
import random
import time
from collections import deque
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import Any

from tqdm import tqdm

from fastmmeval.answering import Answered, Meter, answered, prepared_docs
from fastmmeval.distributed import ONE_PROCESS, Ranks
from fastmmeval.errors import ConfigError, DocError, FailureKind
from fastmmeval.images import DEFAULT_MAX_PIXELS
from fastmmeval.judge.judge import Judge, JudgeSpec
from fastmmeval.judge.pipeline import JudgePanel, Judging, judge_calls, needs_judge
from fastmmeval.metrics import overall_score
from fastmmeval.models import MODELS, Model, parse_model_args
from fastmmeval.models.base import add_usage
from fastmmeval.protocol import MC_MODES
from fastmmeval.results import RunDir, git_hash, versions
from fastmmeval.runlock import run_lock
from fastmmeval.samples import aggregate, build_sample, failure_kind
from fastmmeval.tasks import resolve
from fastmmeval.tasks.overrides import check_gen_kwargs
from fastmmeval.tasks.submission import submission_file
from fastmmeval.tasks.task import Task

MAX_JUDGING_BATCHES = 64  # inference waits for the judges when this many batches await judgment


def _judged_samples(
    task: Task, groups: Iterator[Answered], panel: JudgePanel, meter: Meter
) -> Iterator[list[dict[str, Any]]]:
    """Each group's samples, in order, once the judges have graded it: a group's answers go to the
    judges at once, and the model goes on with the next groups while they work."""
    pending: deque[tuple[Answered, Judging]] = deque()
    for group in groups:
        start = time.perf_counter()
        calls = []
        for item, response in group:
            if response is None or response.error is not None or item.doc is None:
                continue
            try:
                uses = judge_calls(task, item.doc, item.request, response)
            except DocError:
                continue  # build_sample records the same error as the doc's failure
            calls.extend((item.ref.id, use, prompt, case) for use, prompt, case in uses)
        pending.append((group, panel.submit(calls)))
        meter.judge_s += time.perf_counter() - start
        while pending and (pending[0][1].done() or len(pending) > MAX_JUDGING_BATCHES):
            yield _finish_judged(task, *pending.popleft(), meter)
    while pending:
        yield _finish_judged(task, *pending.popleft(), meter)


def _finish_judged(task: Task, group: Answered, judging: Judging, meter: Meter) -> list[dict[str, Any]]:
    start = time.perf_counter()
    verdicts = judging.result()
    scored = time.perf_counter()
    samples = [build_sample(task, item, response, verdicts.get(item.ref.id, {})) for item, response in group]
    meter.judge_s += scored - start
    meter.score_s += time.perf_counter() - scored
    return samples


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
    A task with judge metrics or judge-assisted extraction is graded by `judges` as it goes; a submission
    task's file is written to the run's submissions/ folder, and its results say where. Its results'
    `timing` and `tokens` are those of the docs answered in this process."""
    started = time.perf_counter()
    meter = Meter()
    if needs_judge(task) and (judges is None or ranks.world_size > 1):
        raise ConfigError(_judge_needed([task.name]))
    refs = task.doc_refs(limit)
    done = run.completed(task.name) if ranks.is_main else {}
    if retry_failed:  # the new sample is appended after the failed one and supersedes it
        done = {d: s for d, s in done.items() if failure_kind(s) is not FailureKind.MODEL_ERROR}
    left = set(ranks.share([r.id for r in refs if r.id not in done] if ranks.is_main else None)[0])
    todo = [r for r in refs if r.id in left]
    mine = prepared_docs(model, task, todo[ranks.rank :: ranks.world_size], seed, workers, ahead=2 * batch_size + 2)
    groups = answered(model, mine, batch_size, meter)
    show = progress and ranks.is_main
    with tqdm(total=len(refs), initial=len(refs) - len(todo), desc=task.name, unit="doc", disable=not show) as bar:
        if judges is not None and needs_judge(task):  # one process (checked above)
            for samples in _judged_samples(task, groups, judges, meter):
                meter.docs += len(samples)
                run.append(task.name, samples)
                done.update((s["doc_id"], s) for s in samples)
                bar.update(len(samples))
        else:
            # Every rank takes the same number of steps; a step's samples are a run of `todo`, in order.
            for _ in range(math.ceil(len(todo) / (ranks.world_size * batch_size))):
                group = next(groups, [])
                start = time.perf_counter()
                built = [build_sample(task, item, response) for item, response in group]
                meter.score_s += time.perf_counter() - start
                gathered = ranks.share(built)
                samples = [s for row in zip_longest(*gathered) for s in row if s is not None]
                meter.docs += len(samples)
                if ranks.is_main:
                    run.append(task.name, samples)
                    done.update((s["doc_id"], s) for s in samples)
                bar.update(len(samples))
    results = None
    if ranks.is_main:
        samples = [done[r.id] for r in refs]
        start = time.perf_counter()
        results = aggregate(task, samples, bootstrap_iters, seed)
        meter.score_s += time.perf_counter() - start
        if task.submission is not None:  # rebuilt from every sample, so a resumed run writes the whole file
            data, predictions = submission_file(task.submission, samples)
            name = f"{task.name}.{task.submission.extension}"
            results["submission"] = {"file": run.write_submission(name, data), "predictions": predictions}
        results.update(meter.report(time.perf_counter() - started))
    return ranks.share(results)[0]


def _judge_needed(tasks: list[str]) -> str:
    return (f"task(s) {', '.join(tasks)} need a judge: pass --judge_model/--judge_args or --judge_config "
            "(judged tasks run in one process, without --num_processes)")


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
    judges: list[JudgeSpec] = field(default_factory=list)
    max_image_pixels: int | None = DEFAULT_MAX_PIXELS  # a doc with a larger image fails, unreadable
    allow_absolute_image_paths: bool = False  # for every task, not only those whose dataset allows them
    mc_mode: str | None = None  # gen or ppl for every multiple-choice task (None: each task file's own)
    predict_only: bool = False  # answer every doc, score none
    # Over every generating task's generation settings (tasks.overrides.parse_gen_kwargs's typed values).
    gen_kwargs: dict[str, Any] = field(default_factory=dict)
    system_instruction: str | None = None  # a system turn before every prompt


# What a run started before a setting existed ran with: its default (a run config with a later setting's
# default equals the older one, so --resume finds it).
_SETTING_DEFAULTS = {k: v for k, v in asdict(RunConfig(model="")).items() if k in (
    "max_image_pixels", "allow_absolute_image_paths", "mc_mode", "predict_only", "gen_kwargs", "system_instruction")}


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
    flags: dict[str, Any] | None = None,
) -> tuple[RunDir, dict[str, Any]]:
    """Run `config` and write its run folder; with `resume`, continue the newest matching run
    under `output_path` (or the run folder given) instead of starting over, and with
    `retry_failed` also ask the model again for the docs whose call failed (`model error`: an API
    that gave up after its retries, a timeout). `batch_size` is the checkpoint granularity: samples
    are appended every `batch_size` docs answered (None: the model's own default). With several
    `ranks` (data parallel), every rank calls this: each evaluates a share of the docs, rank 0 writes
    the run folder, and all return its results; a failure on any rank fails all of them. `flags` (the
    command line's resolved flags) are recorded in the manifest, those of the latest invocation."""
    _check(config, batch_size)
    with ranks.guard(), ExitStack() as held:
        return _evaluate(config, output_path, batch_size, resume, progress, command, ranks, retry_failed, held,
                         flags)


def _check(config: RunConfig, batch_size: int | None) -> None:
    """Refuse settings out of range before anything loads."""
    if not config.tasks:
        raise ConfigError("no tasks given (--tasks: comma-separated task or group names)")
    for name, value, low in (("limit", config.limit, 1), ("batch_size", batch_size, 1),
                             ("bootstrap_iters", config.bootstrap_iters, 0)):
        if value is not None and value < low:
            raise ConfigError(f"--{name} must be at least {low}, got {value}")
    if config.mc_mode not in (None, *MC_MODES):
        raise ConfigError(f"--mc_mode must be gen or ppl, got {config.mc_mode!r}")
    check_gen_kwargs(config.gen_kwargs)


def _evaluate(
    config: RunConfig,
    output_path: Path,
    batch_size: int | None,
    resume: bool | Path,
    progress: bool,
    command: list[str] | None,
    ranks: Ranks,
    retry_failed: bool,
    held: ExitStack,
    flags: dict[str, Any] | None,
) -> tuple[RunDir, dict[str, Any]]:
    tasks = resolve(config.tasks, config.include_path, config.max_image_pixels, config.allow_absolute_image_paths,
                    config.mc_mode, config.predict_only, config.gen_kwargs, config.system_instruction)
    for task in tasks:
        for metric in task.metrics:
            problem = metric.unavailable() if metric.unavailable else None
            if problem:
                raise ConfigError(f"task {task.name}: metric {metric.name} cannot run here: {problem}")
    model_cls = MODELS.get(config.model)
    model_args = parse_model_args(config.model_args)
    if ranks.is_main:
        run = _open_run(config, output_path, resume)
        if run is not None:
            _hold(run, command, held)
        fingerprints = {t.name: t.fingerprint() for t in tasks}  # loads (or builds) each task's data
        for task in tasks:
            task.check_breakdown(config.limit)
        manifest = run.read_json("manifest.json") if run is not None else None
        if run is not None and manifest is not None and manifest["task_fingerprints"] != fingerprints:
            changed = [t for t in fingerprints if manifest["task_fingerprints"].get(t) != fingerprints[t]]
            raise ConfigError(f"{run.root}: task(s) {', '.join(changed)} changed since this run began; start a new run")
    _seed_everything(config.seed)
    judged = [t.name for t in tasks if needs_judge(t)]
    if judged and (not config.judges or ranks.world_size > 1):
        raise ConfigError(_judge_needed(judged))  # before any model time is spent
    model = model_cls.from_args(model_args)
    batch_size = batch_size or model.default_batch_size()
    panel = JudgePanel([Judge(s) for s in config.judges]) if config.judges and ranks.is_main else None
    if ranks.is_main and run is None:
        # A new run's folder appears once the model has loaded, with its manifest: a run killed or refused while
        # loading leaves nothing behind for --resume to stumble on.
        run = RunDir.create(output_path, config.model)
        _hold(run, command, held)
    # Once every rank has its model, the others may read the data rank 0 has loaded (and built).
    run = RunDir(ranks.share(run.root if ranks.is_main else None)[0])
    if ranks.is_main:
        manifest = manifest or {
            "run_id": run.root.name,
            "config": asdict(config),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "command": command or [],
            "versions": versions(),
            "git": git_hash(),
            "model_fingerprint": model.fingerprint(),
            "judge_fingerprints": panel.fingerprints() if panel is not None else {},
            "task_fingerprints": fingerprints,
            "resumed": [],
        }
        if resume and (run.root / "samples").exists():
            manifest["resumed"].append(time.strftime("%Y-%m-%dT%H:%M:%S"))
        if flags is not None:
            manifest["flags"] = flags
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


def _hold(run: RunDir, command: list[str] | None, held: ExitStack) -> None:
    """Take the run folder's lock (before any sample is written) and clear what killed writes left."""
    held.enter_context(run_lock(run.root, command or []))
    run.remove_stale_temps()


def _open_run(config: RunConfig, output_path: Path, resume: bool | Path) -> RunDir | None:
    """The run folder to continue, or None for a new run (once `--output_path` is known to take one)."""
    if isinstance(resume, Path):
        run = RunDir(resume)
        manifest = run.read_json("manifest.json")
        if manifest is None:
            raise ConfigError(f"--resume {resume}: no manifest.json there (not a run folder)")
        if {**_SETTING_DEFAULTS, **(manifest.get("config") or {})} != asdict(config):
            raise ConfigError(f"--resume {resume}: that run was started with other settings: {manifest.get('config')}")
        return run
    if resume:
        found = RunDir.find_resumable(output_path, asdict(config), _SETTING_DEFAULTS)
        if found is not None:
            return found
    RunDir.check_output_path(output_path)
    return None
