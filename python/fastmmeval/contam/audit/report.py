"""Contamination reports: JSON, CSV, a bar chart like the paper's Figure 4, an HTML page, and a terminal table.

Files written (each atomically) into the output folder:
    contam_report.json     settings, corpus totals, and per task: shares, skipped frequent n-grams,
                           top examples and every instance's result
    contam_summary.csv     one row per task
    contam_instances.csv   one row per instance
    contam_overlap.png     per task: % of instances with image overlap, text overlap, near-duplicates
    contam_report.html     one self-contained page: settings, corpus, the summary, the chart, and per task
                           its top examples (matched text marked) and every flagged instance
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
from pathlib import Path
from typing import Any

from rich.table import Table

from fastmmeval.util import write_bytes_atomic, write_json_atomic

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


_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: .5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: right; vertical-align: top; }
th:first-child, td:first-child, td.text { text-align: left; }
td.text { white-space: pre-wrap; max-width: 40em; }
p.text { white-space: pre-wrap; }
mark { background: #ffd27f; }
dl { display: grid; grid-template-columns: max-content auto; gap: .1em 1em; }
dt { font-weight: 600; }
dd { margin: 0; }
.example { border-left: 3px solid #DD8452; padding: .2em .8em; margin: .8em 0; }
.muted { color: #666; }
.images { display: flex; flex-wrap: wrap; gap: .8em; }
figure { margin: 0; font-size: 12px; color: #555; }
"""


def _esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _marked(question: str, matched: list[str]) -> str:
    """The question, escaped, with each matched span (in order, not overlapping) marked."""
    out, pos = [], 0
    for span in matched:
        at = question.find(span, pos)
        if at < 0:
            continue
        out += [_esc(question[pos:at]), f"<mark>{_esc(span)}</mark>"]
        pos = at + len(span)
    return "".join([*out, _esc(question[pos:])])


def _rows(header: list[str], rows: list[list[str]]) -> str:
    """An HTML table of the header (escaped here) and rows of cells made by `_cell`."""
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _cell(value: Any, text: bool = False) -> str:
    return f'<td class="text">{value}</td>' if text else f"<td>{_esc(value)}</td>"


def _ids(e: dict[str, Any]) -> str:
    ids = [*e["text"].get("training_ids", []), *e["image"].get("training_ids", [])]
    return _esc(", ".join(dict.fromkeys(ids)))


def _figures(uris: list[str], caption: str) -> str:
    return "".join(f'<figure><img alt="{_esc(caption)}" src="{_esc(u)}"><figcaption>{_esc(caption)}</figcaption>'
                   "</figure>" for u in uris)  # fmt: skip


def _example(e: dict[str, Any], bench: dict[str, list[str]], training: dict[str, list[str]]) -> str:
    text, image = e["text"], e["image"]
    near = ", ".join(f"{d['training_id']} ({d['jaccard']:.2f})" for d in e.get("near_duplicates", []))
    facts = [
        ("text n-grams", f"{text['present']} present, {text['frequent']} frequent of {text['ngrams']} "
                         f"(fraction {_pct(text['fraction'])})"),
        ("images", f"{image['overlapping_images']} of {image['images']} overlap ({image['present']} n-grams "
                   f"present, {image['frequent']} frequent of {image['ngrams']})"),
        ("training ids (text)", ", ".join(text.get("training_ids", [])) or "—"),
        ("training ids (image)", ", ".join(image.get("training_ids", [])) or "—"),
        ("near-duplicates", near or "—"),
    ]  # fmt: skip
    dl = "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(v)}</dd>" for k, v in facts)
    question = _marked(e.get("question", ""), text["matched"])
    figures = _figures(bench.get(e["doc_id"], []), "benchmark image") + "".join(
        _figures(training.get(i, []), f"training {i}") for i in image.get("training_ids", [])
    )
    images = f'<div class="images">{figures}</div>' if figures else ""
    return f'<div class="example"><h4>{_esc(e["doc_id"])}</h4><p class="text">{question}</p>{images}<dl>{dl}</dl></div>'


def _task_section(t: dict[str, Any], thumbnails: dict[str, Any]) -> str:
    entries = t["instance_results"]
    flagged = [e for e in entries if e.get("flagged") or e.get("near_duplicates")]
    parts = [f"<h2>{_esc(t['task'])}</h2>"]
    near = sum(bool(e.get("near_duplicates")) for e in entries)
    parts.append(
        f"<p>{t['flagged']} of {t['instances']} instances share n-grams with the training data, {near} have a "
        f"near-duplicate question there, {t['errors']} could not be read.</p>"
    )
    if t["top_examples"]:
        bench, training = thumbnails.get("benchmark", {}).get(t["task"], {}), thumbnails.get("training", {})
        parts.append("<h3>Top examples</h3>" + "".join(_example(e, bench, training) for e in t["top_examples"]))
    if flagged:
        rows = [
            [
                _cell(e["doc_id"]),
                _cell(_pct(e["text"]["fraction"]) if e["text_overlap"] else "—"),
                _cell(f"{e['image']['overlapping_images']}/{e['image']['images']}"),
                _cell(len(e.get("near_duplicates", []))),
                _cell(_ids(e), text=True),
                _cell(_esc(" | ".join(e["text"]["matched"])), text=True),
            ]
            for e in flagged
        ]
        header = ["doc", "text fraction", "images overlapping", "near-dups", "training ids", "matched text"]
        parts.append("<h3>Every flagged instance</h3>" + _rows(header, rows))
    errors = [e for e in entries if e.get("error") is not None]
    if errors:
        rows = [[_cell(e["doc_id"]), _cell(_esc(e["error"]), text=True)] for e in errors]
        parts.append("<h3>Instances that could not be read</h3>" + _rows(["doc", "why"], rows))
    return "".join(parts)


def html_report(report: dict[str, Any], chart_png: bytes, thumbnails: dict[str, Any] | None = None) -> bytes:
    """The report as one self-contained HTML page (the chart and the thumbnails of `contam.audit.thumbnails.collect`
    inlined; every value from the data escaped)."""
    settings = report.get("settings", {})
    facts = [(k, json.dumps(v) if isinstance(v, (dict, list)) else v) for k, v in settings.items()]
    facts += [(f"corpus: {k}", json.dumps(v)) for k, v in report.get("corpus", {}).items()]
    dl = "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(v)}</dd>" for k, v in facts)
    summary = [
        [
            _cell(t["task"]),
            _cell(t["instances"]),
            _cell(t["errors"]),
            _cell(_pct(t["text_overlap_share"])),
            _cell(_pct(t["image_overlap_share"])),
            _cell(_pct(t["near_duplicate_share"])),
            _cell(_pct(t["any_overlap_share"])),
            _cell(_pct(t["mean_text_fraction"])),
            _cell(f"{t['frequent_text_ngrams_skipped']} / {t['frequent_image_ngrams_skipped']}"),
        ]
        for t in report["tasks"].values()
    ]
    header = ["task", "instances", "errors", "text overlap", "image overlap", "near-duplicate", "any",
              "mean text fraction", "frequent skipped (text / image)"]  # fmt: skip
    chart = base64.b64encode(chart_png).decode("ascii")
    page = (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Contamination scan</title>'
        f"<style>{_STYLE}</style></head><body><h1>Contamination scan</h1><dl>{dl}</dl>"
        f"<h2>Summary</h2>{_rows(header, summary)}"
        f'<p class="muted">Shares of instances: image overlap among those with images; an instance overlaps when '
        f"one of its n-grams occurs 1 to threshold times in the training data.</p>"
        f'<img alt="overlap per task" src="data:image/png;base64,{chart}">'
        + "".join(_task_section(t, thumbnails or {}) for t in report["tasks"].values())
        + "</body></html>\n"
    )
    return page.encode("utf-8")


def write_report(out: Path, report: dict[str, Any], thumbnails: dict[str, Any] | None = None) -> list[Path]:
    """Write the five report files into `out` (the HTML page with `thumbnails`, if given); returns their paths."""
    out = Path(out)
    names = ("contam_report.json", "contam_summary.csv", "contam_instances.csv", "contam_overlap.png",
             "contam_report.html")  # fmt: skip
    paths = [out / n for n in names]
    write_json_atomic(paths[0], report)
    summaries = [{k: t[k] for k in SUMMARY_COLUMNS} for t in report["tasks"].values()]
    write_bytes_atomic(paths[1], _csv_bytes(SUMMARY_COLUMNS, summaries))
    rows = [instance_row(name, e) for name, t in report["tasks"].items() for e in t["instance_results"]]
    write_bytes_atomic(paths[2], _csv_bytes(INSTANCE_COLUMNS, rows))
    chart = overlap_chart(report)
    write_bytes_atomic(paths[3], chart)
    write_bytes_atomic(paths[4], html_report(report, chart, thumbnails))
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


def summary_lines(report: dict[str, Any]) -> list[str]:
    """What a terminal shows under the summary table: the corpus's missing images, and how a corpus streamed
    to name training ids was read (without its images, or with image tokens from the index's image cache)."""
    corpus = report["corpus"]
    missing = {k: v["missing_images"] for k, v in corpus.items() if v.get("missing_images") is not None}
    lines = [f"images missing or unreadable in the corpus: {missing}"]
    streamed = corpus.get("streamed", {})
    if not streamed.get("images_read", True):
        lines.append("the corpus was streamed again without its images: no image n-gram matched the index")
    cached = streamed.get("image_cache")
    if cached:
        lines.append(
            f"image tokens of {cached['read']} shard(s) read from the index's image cache; images decoded again "
            f"for {cached['stale']} whose images changed since and {cached['absent']} the index has no entry for"
        )
    return lines
