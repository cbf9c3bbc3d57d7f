"""An audit as `contam scan` runs one: a scan whose report records the settings it ran with, and the report's
files, the HTML page with thumbnails of its image matches."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastmmeval.contam.audit import thumbnails
from fastmmeval.contam.audit.report import write_report
from fastmmeval.contam.audit.scan import ScanOptions, scan
from fastmmeval.contam.ngram.index import NgramIndex
from fastmmeval.contam.ngram.settings import ShardSource
from fastmmeval.contam.readers.tokenizers import Tokenizers
from fastmmeval.tasks.task import Task


def audit_tasks(
    tasks: Sequence[Task],
    tokenizers: Tokenizers,
    options: ScanOptions,
    index: NgramIndex | None = None,
    corpus: Sequence[ShardSource] | None = None,
    corpus_specs: Sequence[str] = (),
) -> dict[str, Any]:
    """The report of `scan` with its "settings": index or streaming mode, the index folder, the corpus shards as
    given (`corpus_specs`), the n-gram settings, the tokenizers and the near-duplicate threshold."""
    report = scan(tasks, tokenizers.text, tokenizers.image, options, index=index, corpus=corpus)
    settings = options.settings
    report["settings"] = {
        "mode": "index" if index is not None else "stream",
        "index": None if index is None else str(index.path),
        "corpus": list(corpus_specs),
        "n": settings.n,
        "threshold": settings.threshold,
        "dedup_docs": settings.dedup_docs,
        **tokenizers.describe(),
        "near_dup_threshold": options.near_dup_threshold,
    }
    return report


def write_audit(
    out: Path, report: dict[str, Any], tasks: Sequence[Task], corpus: Sequence[ShardSource] | None = None
) -> list[Path]:
    """Write the report's files into `out` (`write_report`), the HTML page with the thumbnails of its top image
    matches (training images from the record shards of `corpus`); returns their paths."""
    return write_report(out, report, thumbnails.collect(report, tasks, corpus))
