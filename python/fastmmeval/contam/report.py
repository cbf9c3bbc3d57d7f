"""Contamination reports: JSON, CSV, a bar chart like the paper's Figure 4, and a terminal table.

Files written (each atomically) into the output folder:
    contam_report.json     settings, corpus totals, and per task: shares, skipped frequent n-grams,
                           top examples and every instance's result
    contam_summary.csv     one row per task
    contam_instances.csv   one row per instance
    contam_overlap.png     per task: % of instances with image overlap, text overlap, near-duplicates
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from rich.table import Table

from fastmmeval.results import write_bytes_atomic, write_json_atomic

SUMMARY_COLUMNS = (
    "task", "instances", "errors", "flagged", "text_overlap_share", "image_overlap_share", "near_duplicate_share",
    "any_overlap_share", "mean_text_fraction", "frequent_text_ngrams_skipped", "frequent_image_ngrams_skipped",
)  # fmt: skip
INSTANCE_COLUMNS = (
    "task", "doc_id", "flagged", "text_ngrams", "text_frequent", "text_present", "text_fraction", "images",
    "image_ngrams", "image_frequent", "image_present", "image_fraction", "near_duplicates", "training_ids",
    "matched_text", "error",
)  # fmt: skip


def _csv_bytes(columns: tuple[str, ...], rows: list[dict[str, Any]]) -> bytes:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue().encode("utf-8")


def instance_row(task: str, e: dict[str, Any]) -> dict[str, Any]:
    """One CSV row of an instance result."""
    if e.get("error") is not None:
        return {"task": task, "doc_id": e["doc_id"], "flagged": False, "error": e["error"]}
    text, image = e["text"], e["image"]
    ids = [*text.get("training_ids", []), *image.get("training_ids", [])]
    return {
        "task": task,
        "doc_id": e["doc_id"],
        "flagged": e["flagged"],
        "text_ngrams": text["ngrams"],
        "text_frequent": text["frequent"],
        "text_present": text["present"],
        "text_fraction": text["fraction"],
        "images": image["images"],
        "image_ngrams": image["ngrams"],
        "image_frequent": image["frequent"],
        "image_present": image["present"],
        "image_fraction": image["fraction"],
        "near_duplicates": ";".join(d["training_id"] for d in e.get("near_duplicates", [])),
        "training_ids": ";".join(dict.fromkeys(ids)),
        "matched_text": " | ".join(text["matched"]),
        "error": "",
    }


def _percent(x: float | None) -> float:
    return 0.0 if x is None else 100.0 * x


def overlap_chart(report: dict[str, Any]) -> bytes:
    """A PNG bar chart: per task, the % of instances with image overlap, text overlap and near-duplicates."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(report["tasks"].values())
    series = [
        ("image overlap", "image_overlap_share", "#4C72B0"),
        ("text overlap", "text_overlap_share", "#DD8452"),
        ("near-duplicate question", "near_duplicate_share", "#55A868"),
    ]
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(tasks) + 2), 3.6), dpi=120)
    for k, (label, key, color) in enumerate(series):
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(tasks))]
        values = [_percent(t[key]) for t in tasks]
        bars = ax.bar(xs, values, width, label=label, color=color)
        ax.bar_label(bars, labels=[f"{v:.1f}" for v in values], fontsize=7, padding=1)
    ax.set_xticks(range(len(tasks)), [t["task"] for t in tasks], rotation=30, ha="right")
    ax.set_ylabel("% of instances")
    ax.set_ylim(0, 105)
    ax.set_title("Benchmark overlap with the training data")
    ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def write_report(out: Path, report: dict[str, Any]) -> list[Path]:
    """Write the four report files into `out`; returns their paths."""
    out = Path(out)
    names = ("contam_report.json", "contam_summary.csv", "contam_instances.csv", "contam_overlap.png")
    paths = [out / n for n in names]
    write_json_atomic(paths[0], report)
    summaries = [{k: t[k] for k in SUMMARY_COLUMNS} for t in report["tasks"].values()]
    write_bytes_atomic(paths[1], _csv_bytes(SUMMARY_COLUMNS, summaries))
    rows = [instance_row(name, e) for name, t in report["tasks"].items() for e in t["instance_results"]]
    write_bytes_atomic(paths[2], _csv_bytes(INSTANCE_COLUMNS, rows))
    write_bytes_atomic(paths[3], overlap_chart(report))
    return paths


def summary_table(report: dict[str, Any]) -> Table:
    """A terminal table: one row per task."""
    table = Table(title="contamination scan")
    for col in ("Task", "n", "Errors", "Text overlap", "Image overlap", "Near-dup", "Any", "Frequent skipped"):
        table.add_column(col, justify="left" if col == "Task" else "right", no_wrap=True)

    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}%"

    for t in report["tasks"].values():
        table.add_row(
            t["task"],
            str(t["instances"]),
            str(t["errors"]),
            pct(t["text_overlap_share"]),
            pct(t["image_overlap_share"]),
            pct(t["near_duplicate_share"]),
            pct(t["any_overlap_share"]),
            f"{t['frequent_text_ngrams_skipped']} text / {t['frequent_image_ngrams_skipped']} image",
        )
    return table
