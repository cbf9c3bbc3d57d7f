"""`fastmmeval judge agree RUN`: agreement between the judges that scored a run's samples."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from fastmmeval.errors import ConfigError
from fastmmeval.judge.agreement import agreement
from fastmmeval.results import RunDir


def add_parser(sub: Any) -> None:
    """The `judge` subcommand tree."""
    p = sub.add_parser("judge", help="judge tools (agreement between the judges of a run)")
    tools = p.add_subparsers(dest="judge_command", required=True)
    a = tools.add_parser("agree", help="Cohen's kappa (labels) and Krippendorff's alpha (ratings) between judges")
    a.add_argument("run", type=Path, help="a run folder (with samples/<task>.jsonl)")
    a.add_argument("--judges", default=None, help="comma-separated judge names (default: all judges found)")
    a.add_argument("--tasks", default=None, help="comma-separated task names (default: every task of the run)")


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


def main(args: argparse.Namespace) -> int:
    """Print the agreement report as JSON."""
    judges = args.judges.split(",") if args.judges else None
    tasks = args.tasks.split(",") if args.tasks else None
    print(json.dumps(run_agreement(args.run, judges, tasks), indent=2))
    return 0
