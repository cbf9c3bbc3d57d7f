"""`fastmmeval judge agree RUN`: agreement between the judges that scored a run's samples."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from fastmmeval.judge.agreement import run_agreement


def add_parser(sub: Any) -> None:
    """The `judge` subcommand tree."""
    p = sub.add_parser("judge", help="judge tools (agreement between the judges of a run)")
    tools = p.add_subparsers(dest="judge_command", required=True)
    a = tools.add_parser("agree", help="Cohen's kappa (labels) and Krippendorff's alpha (ratings) between judges")
    a.add_argument("run", type=Path, help="a run folder (with samples/<task>.jsonl)")
    a.add_argument("--judges", default=None, help="comma-separated judge names (default: all judges found)")
    a.add_argument("--tasks", default=None, help="comma-separated task names (default: every task of the run)")


def main(args: argparse.Namespace) -> int:
    """Print the agreement report as JSON."""
    judges = args.judges.split(",") if args.judges else None
    tasks = args.tasks.split(",") if args.tasks else None
    print(json.dumps(run_agreement(args.run, judges, tasks), indent=2))
    return 0
