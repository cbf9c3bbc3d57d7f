"""The Lite validation and contamination scan shown beside a run's scores: the lite-vs-full scatter per task and
each task's overlap shares."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastmmeval.errors import ConfigError


def _read(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: cannot read the {what} ({e})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a {what} (a JSON object expected)")
    return data


def lite_view(path: Path) -> list[dict[str, Any]]:
    """Per task of a `fastmmeval lite validate` report: the metric, each model's full and lite scores, Pearson
    and whether the lite set is kept."""
    data = _read(path, "lite validation (`fastmmeval lite validate --out`)")
    if not isinstance(data.get("tasks"), list):
        raise ConfigError(f"{path}: no `tasks` list (not the output of `fastmmeval lite validate`)")
    return [{"task": t["task"], "metric": t.get("metric"), "keep_full": t.get("keep_full"),
             "pearson": (t.get("correlations") or {}).get("pearson"),
             "models": [{"model": m, "full": s.get("full"), "lite": s.get("lite")} for m, s in t["scores"].items()]}
            for t in data["tasks"]]


def contam_view(path: Path) -> dict[str, dict[str, Any]]:
    """Per task of a contamination scan (contam_report.json, or the folder holding it): its overlap shares."""
    if path.is_dir():
        path = path / "contam_report.json"
    data = _read(path, "contamination report (contam_report.json of `fastmmeval contam scan`)")
    if not isinstance(data.get("tasks"), dict):
        raise ConfigError(f"{path}: no `tasks` mapping (not a contam_report.json)")
    keys = ("any_overlap_share", "text_overlap_share", "image_overlap_share", "near_duplicate_share")
    return {name: {k: t.get(k) for k in keys} | {"instances": t.get("instances")} for name, t in data["tasks"].items()}
