"""Logging a finished run folder to Weights & Biases and TensorBoard, as lmms-eval's `--wandb_args` does:
the run's scalars (metrics, stderrs, counts, breakdowns, overall, timing and tokens where recorded), and to
W&B also its config and one samples table per task. The W&B API key is wandb's business: it reads it from
the environment (or its own login); nothing here sees or writes it."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from fastmmeval.errors import ConfigError
from fastmmeval.report.summary import read_run
from fastmmeval.results import RunDir

# The wandb.init arguments that make sense from a command line (the rest are Python objects or internals).
WANDB_KEYS = ("project", "entity", "name", "group", "job_type", "tags", "notes", "mode", "dir", "id", "resume")
_WANDB_MODES = ("online", "offline", "disabled")
SAMPLE_COLUMNS = ("doc_id", "prompt", "response", "extracted", "target", "metrics", "failed")


def parse_wandb_args(text: str) -> dict[str, str]:
    """`project=p,name=n,tags=a|b,...` (lmms-eval's `--wandb_args`) as {key: value}; `project` is required."""
    out: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep:
            raise ConfigError(f"--wandb_args: {item.strip()!r} is not key=value (keys: {', '.join(WANDB_KEYS)})")
        if key not in WANDB_KEYS:
            raise ConfigError(f"--wandb_args: unknown key {key!r} (keys: {', '.join(WANDB_KEYS)})")
        if not value:
            raise ConfigError(f"--wandb_args: {key} has an empty value")
        if key in out:
            raise ConfigError(f"--wandb_args: {key} given twice")
        out[key] = value
    if "project" not in out:
        raise ConfigError("--wandb_args: project=... is required")
    if "mode" in out and out["mode"] not in _WANDB_MODES:
        raise ConfigError(f"--wandb_args: mode {out['mode']!r} is not one of {', '.join(_WANDB_MODES)}")
    return out


def run_scalars(summary: Mapping[str, Any]) -> dict[str, float]:
    """The scalars of a run's results.json, by name: `<task>/<metric>`, `<task>/<metric>_stderr`, `<task>/n`,
    `<task>/n_failed`, `<task>/<field>/<category>/<metric>` (and `_stderr`, `/n`) for breakdowns,
    `<task>/timing/...` and `<task>/tokens/...` where recorded, `overall` and `overall_stderr`, and the run's
    `timing/...`, `tokens/...`, `usage/...`. Values that are None or not finite are left out."""
    out: dict[str, Any] = {}
    for task, result in summary.get("results", {}).items():
        for metric, entry in result.get("metrics", {}).items():
            out[f"{task}/{metric}"] = entry.get("value")
            out[f"{task}/{metric}_stderr"] = entry.get("stderr")
        out[f"{task}/n"] = result.get("n")
        out[f"{task}/n_failed"] = result.get("n_failed")
        for field, categories in (result.get("breakdowns") or {}).items():
            for category, keys in categories.items():
                for key, value in keys.items():
                    out[f"{task}/{field}/{category}/{key.split(',')[0]}"] = value  # "acc,none": lmms-eval's key
        for section in ("timing", "tokens"):
            out.update(_leaves(result.get(section), f"{task}/{section}"))
    overall = summary.get("overall") or {}
    out["overall"], out["overall_stderr"] = overall.get("overall"), overall.get("stderr")
    for section in ("timing", "tokens", "usage"):
        out.update(_leaves(summary.get(section), section))
    return {k: float(v) for k, v in out.items() if _is_number(v) and math.isfinite(v)}


def _leaves(value: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    """The leaves of a nested dict as (`prefix/a/b`, value)."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            yield from _leaves(inner, f"{prefix}/{key}")
    elif value is not None:
        yield prefix, value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def sample_rows(run: Path, task: str) -> list[list[str]]:
    """One row per doc of `task` (columns SAMPLE_COLUMNS, all text): the prompt as `role: content` turns,
    values that are not text as JSON, `failed` the reason the doc failed (empty when it was scored)."""
    rows = []
    for sample in RunDir(run).completed(task, repair=False).values():
        prompt = "\n\n".join(f"{turn['role']}: {turn['content']}" for turn in sample.get("prompt") or [])
        rows.append([
            str(sample["doc_id"]),
            prompt,
            _text(sample.get("response")),
            _text(sample.get("extracted")),
            _text(sample.get("target")),
            json.dumps(sample.get("metrics") or {}, ensure_ascii=False, default=str),
            sample.get("failed") or "",
        ])
    return rows


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def run_config(results: Mapping[str, Any], manifest: Mapping[str, Any]) -> dict[str, Any]:
    """What W&B records as the run's config: the run config, its id, and the model, judge and task
    fingerprints, package versions and git commit from the manifest."""
    config = dict(manifest.get("config") or results.get("config") or {})
    config["run_id"] = results.get("run_id") or manifest.get("run_id")
    for key in ("model_fingerprint", "judge_fingerprints", "task_fingerprints", "versions", "git"):
        if key in manifest:
            config[key] = manifest[key]
    return config


def log_run(run: Path, *, wandb_args: dict[str, str] | None = None, tensorboard_dir: Path | None = None) -> None:
    """Log the finished run folder `run` to W&B (`wandb.init(**wandb_args)`: scalars, config and a
    `samples/<task>` table per task) and/or to TensorBoard (the scalars, under `tensorboard_dir/<run_id>`)."""
    results, manifest = read_run(run)
    scalars = run_scalars(results)
    if wandb_args is not None:
        _log_wandb(run, wandb_args, results, manifest, scalars)
    if tensorboard_dir is not None:
        _log_tensorboard(tensorboard_dir / str(results.get("run_id") or run.name), scalars)


def _log_wandb(
    run: Path, args: dict[str, str], results: dict[str, Any], manifest: dict[str, Any], scalars: dict[str, float]
) -> None:
    try:
        import wandb
    except ImportError:
        raise ConfigError("--wandb_args: wandb is not installed: pip install wandb") from None
    kwargs: dict[str, Any] = dict(args)
    if "tags" in kwargs:
        kwargs["tags"] = [tag.strip() for tag in kwargs["tags"].split("|") if tag.strip()]
    try:
        logged = wandb.init(**kwargs, config=run_config(results, manifest))
    except wandb.Error as e:
        raise ConfigError(f"--wandb_args: wandb.init failed: {e}") from None
    try:
        tables = {
            f"samples/{task}": wandb.Table(columns=list(SAMPLE_COLUMNS), data=sample_rows(run, task))
            for task in results.get("results", {})
        }
        logged.log({**scalars, **tables}, step=0)
    except BaseException:
        logged.finish(exit_code=1)
        raise
    logged.finish()


def _log_tensorboard(log_dir: Path, scalars: dict[str, float]) -> None:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ConfigError("--tensorboard: needs torch and tensorboard: pip install tensorboard") from None
    writer = SummaryWriter(log_dir=str(log_dir))
    try:
        for name, value in scalars.items():
            writer.add_scalar(name, value, global_step=0)
        writer.flush()
    finally:
        writer.close()
