"""What the report shows of one run folder: per task the headline with its 95% CI, counts, failures, judging,
breakdowns and efficiency, read from results.json and manifest.json."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from fastmmeval.errors import ConfigError

Z95 = 1.959964  # two-sided 95% normal quantile


def read_run(run: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(results.json, manifest.json) of a run folder; one error line when it is not one."""
    data = []
    for name in ("results.json", "manifest.json"):
        path = run / name
        if not path.is_file():
            raise ConfigError(f"{run}: no {name} (not a finished run folder)")
        try:
            data.append(json.loads(path.read_text()))
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}: not JSON ({e})") from None
    return data[0], data[1]


def _ci(value: float | None, stderr: float | None) -> list[float] | None:
    if value is None or stderr is None:
        return None
    return [value - Z95 * stderr, value + Z95 * stderr]


def task_row(name: str, r: dict[str, Any], overall: dict[str, Any]) -> dict[str, Any]:
    """One task's summary: headline value and CI (metric scale), 0-100 score, counts, failures, judging, timing."""
    metric = r.get("headline_as")
    m = (r.get("metrics") or {}).get(metric or "", {})
    failed_judgments = r.get("failed_judgments") or {}
    return {
        "task": name,
        "version": r.get("version"),
        "fingerprint": r.get("fingerprint"),
        "metric": metric,
        "value": m.get("value"),
        "stderr": m.get("stderr"),
        "ci": _ci(m.get("value"), m.get("stderr")),
        "score_100": (overall.get("per_task") or {}).get(name),
        "n": r.get("n"),
        "n_scored": r.get("n_scored"),
        "n_failed": r.get("n_failed"),
        "failures": r.get("failures") or {},
        "n_judged": sum((r.get("n_judged") or {}).values()) if r.get("n_judged") else None,
        "judge_failures": sum(failed_judgments.values()),
        "extract_rules": r.get("extract_rules") or {},
        "timing": r.get("timing") or {},
        "tokens": r.get("tokens") or {},
    }


def breakdown_charts(name: str, r: dict[str, Any]) -> list[dict[str, Any]]:
    """Per breakdown field of a task: categories with the headline value, its 95% CI and n. A LiveBench-style
    `subtask` field is also drawn as a radar."""
    metric = r.get("headline_as")
    out = []
    for field_name, categories in (r.get("breakdowns") or {}).items():
        rows = []
        for category, v in categories.items():
            value, stderr = v.get(f"{metric},none"), v.get(f"{metric}_stderr,none")
            rows.append({"category": category, "value": value, "ci": _ci(value, stderr), "n": v.get("n")})
        out.append({"task": name, "field": field_name, "metric": metric, "categories": rows,
                    "radar": field_name == "subtask" and len(rows) >= 3})
    return out


def _short_hash(value: Any) -> str | None:
    """A model fingerprint (a mapping of everything that identifies the weights and settings) as 16 hex digits."""
    if value is None or isinstance(value, str):
        return value
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def run_view(run: Path) -> dict[str, Any]:
    """Everything the report shows of one run, JSON-able."""
    results, manifest = read_run(run)
    config = manifest.get("config") or {}
    overall = results.get("overall") or {}
    tasks = results.get("results") or {}
    return {
        "run_id": results.get("run_id") or run.name,
        "path": str(run),
        "model": config.get("model"),
        "model_args": config.get("model_args"),
        "model_fingerprint": _short_hash(manifest.get("model_fingerprint")),
        "started": manifest.get("started"),
        "finished": manifest.get("finished"),
        "command": " ".join(manifest.get("command") or []),
        "flags": manifest.get("flags") or {},
        "overall": overall.get("overall"),
        "overall_stderr": overall.get("stderr"),
        "excluded": [e.get("task") for e in overall.get("excluded", [])],
        "tasks": [task_row(n, r, overall) for n, r in tasks.items()],
        "breakdowns": [c for n, r in tasks.items() for c in breakdown_charts(n, r)],
        "usage": results.get("usage") or {},
        "judge_usage": results.get("judge_usage") or {},
    }
