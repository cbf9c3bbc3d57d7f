"""fastmmeval report: the HTML report of runs, run comparison, and run logging."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fastmmeval.util import write_bytes_atomic

REPORT_NAME = "report.html"
DEFAULT_THUMBNAILS = 300  # per task: the first docs' images are embedded, later rows show the image's ref


def write_report(
    runs: Sequence[Path],
    out: Path,
    *,
    allow_mismatch: bool = False,
    lite: Path | None = None,
    contam: Path | None = None,
    thumbnails: int = DEFAULT_THUMBNAILS,
    bootstrap_iters: int = 10000,
    seed: int = 0,
) -> Path:
    """Write one self-contained report.html of the run folders (the first is the baseline of the comparison when
    there are several; runs whose task protocols differ are refused unless `allow_mismatch`), with a Lite
    validation report and a contamination scan shown beside the scores when given; returns its path."""
    from fastmmeval.report.comparison import compare_runs
    from fastmmeval.report.links import contam_view, lite_view
    from fastmmeval.report.page import page
    from fastmmeval.report.samples_view import samples_section
    from fastmmeval.report.summary import run_view

    views = [run_view(r) for r in runs]
    comparison = (compare_runs(runs, allow_mismatch=allow_mismatch, bootstrap_iters=bootstrap_iters, seed=seed)
                  if len(runs) > 1 else None)
    text = page(views, comparison, lite_view(lite) if lite else None, contam_view(contam) if contam else None,
                samples_section(runs, thumbnails=thumbnails))
    write_bytes_atomic(out, text.encode("utf-8"))
    return out


def write_run_report(run: Path) -> Path:
    """Write `run`/report.html, the report of that run alone; returns its path."""
    return write_report([run], run / REPORT_NAME)


__all__ = ["REPORT_NAME", "write_report", "write_run_report"]
