"""`fastmmeval report RUN_DIR... --out report.html`: the HTML report of runs and their comparison."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fastmmeval.argtypes import non_negative_int, seed_int
from fastmmeval.console import stdout_console
from fastmmeval.report import DEFAULT_THUMBNAILS


def add_parser(sub: Any) -> None:
    """Add `report`."""
    p = sub.add_parser("report", help="one self-contained HTML report of runs (several: compared with paired tests)")
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run folders; the first is the baseline")
    p.add_argument("--out", type=Path, default=Path("report.html"), help="the HTML file (written atomically)")
    p.add_argument("--allow_mismatch", action="store_true",
                   help="show runs whose task protocols differ side by side (marked) instead of refusing them")
    p.add_argument("--lite", type=Path, default=None, help="a `fastmmeval lite validate --out` report to show")
    p.add_argument("--contam", type=Path, default=None, help="a contamination scan (contam_report.json or its folder)")
    p.add_argument("--thumbnails", type=non_negative_int, default=DEFAULT_THUMBNAILS,
                   help="per task, how many docs' images are embedded as thumbnails")
    p.add_argument("--bootstrap_iters", type=non_negative_int, default=10000,
                   help="resamples of the paired bootstrap for non-0/1 metrics")
    p.add_argument("--seed", type=seed_int, default=0, help="seeds the paired bootstrap")


def main(args: argparse.Namespace) -> int:
    """Write the report and print its path and, for several runs, one comparison line per task."""
    from fastmmeval.report import write_report

    out = write_report(args.runs, args.out, allow_mismatch=args.allow_mismatch, lite=args.lite, contam=args.contam,
                       thumbnails=args.thumbnails, bootstrap_iters=args.bootstrap_iters, seed=args.seed)
    stdout_console().print(f"report: {out}", soft_wrap=True, markup=False)
    return 0
