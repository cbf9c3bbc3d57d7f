"""The samples browser of report.html: every sample of the runs, filterable by run, task, status, extraction rule,
judge score and doc id, paginated. A compact columnar index is embedded as JSON; the rows travel in gzipped chunks
that the page inflates only for the page shown, so a 100k-sample run opens at once.

A sample's status: `failed` (the doc failed, `failure_kind` says why), `unparsed` (no rule read an answer; scored
wrong), `correct` / `wrong` (the headline metric, `headline_as`, when all its per-doc values lie in [0, 1]:
correct at 0.5 or more, so 1 for a 0/1 metric), `scored` (a continuous or corpus-level headline metric: no verdict
per doc), or `unscored` (no headline value: a predict-only run, a failed judgment)."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

from fastmmeval.errors import DocError
from fastmmeval.extract.base import UNPARSED
from fastmmeval.images import DEFAULT_MAX_PIXELS
from fastmmeval.judge.pipeline import EXTRACT
from fastmmeval.protocol import ImagePart
from fastmmeval.results import RunDir

STATUSES = ("correct", "wrong", "failed", "unparsed", "scored", "unscored")
CHUNK = 500  # rows per gzipped chunk


def _script_json(data: Any) -> str:
    """JSON safe inside a <script> element: no `</` or `<!--` can end or comment it."""
    text = json.dumps(data, ensure_ascii=False, default=str, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    return float(value) if isinstance(value, int | float) and value == value else None


def statuses(samples: Sequence[dict[str, Any]], headline: str | None) -> list[str]:
    """The status of each sample of one task (see the module docstring), `headline` being its `headline_as`."""
    values = [(s.get("metrics") or {}).get(headline) if headline else None for s in samples]
    numbers = [_number(v) for v in values]
    verdicts = all(n is not None and 0 <= n <= 1 for v, n in zip(values, numbers, strict=True) if v is not None)
    out = []
    for sample, value, number in zip(samples, values, numbers, strict=True):
        if sample.get("failed") is not None:
            out.append("failed")
        elif sample.get("extract_rule") == UNPARSED:
            out.append("unparsed")
        elif value is None:
            out.append("unscored")
        elif not verdicts or number is None:
            out.append("scored")
        else:
            out.append("correct" if number >= 0.5 else "wrong")
    return out


def judge_score(sample: dict[str, Any]) -> float | None:
    """The first judge's numeric verdict on the first use that is not an extraction (None: not judged so)."""
    for use, by_judge in (sample.get("judgments") or {}).items():
        if use != EXTRACT and by_judge:
            return _number(next(iter(by_judge.values())).get("value"))
    return None


def _row(sample: dict[str, Any], thumbs: list[str] | None) -> dict[str, Any]:
    """What the page shows of a sample."""
    judgments = [{"use": use, "judge": judge, "value": r.get("value"), "raw": r.get("raw"), "error": r.get("error")}
                 for use, by_judge in (sample.get("judgments") or {}).items() for judge, r in by_judge.items()]
    keep = ("doc_id", "prompt", "images", "response", "continuations", "logprobs", "extracted", "target", "metrics",
            "extract_rule", "failed", "failure_kind")
    row = {k: sample[k] for k in keep if sample.get(k) is not None}
    if judgments:
        row["judgments"] = judgments
    if thumbs:
        row["thumbs"] = thumbs
    return row


def thumbnails_of(config: dict[str, Any], wanted: dict[str, list[dict[str, Any]]]
                  ) -> tuple[dict[str, dict[str, list[str]]], list[str]]:
    """Thumbnails ({task: {doc id: [data URI]}}) of the `wanted` samples of each task, read from the docs of the
    run's tasks (its manifest `config`), and a notice for each task whose docs cannot be read here."""
    wanted = {name: samples for name, samples in wanted.items() if any(s.get("images") for s in samples)}
    if not wanted:
        return {}, []
    from fastmmeval.contam.audit.thumbnails import data_uri
    from fastmmeval.tasks import resolve

    try:
        tasks = {t.name: t for t in resolve(
            config.get("tasks") or list(wanted), config.get("include_path") or [],
            config.get("max_image_pixels", DEFAULT_MAX_PIXELS), bool(config.get("allow_absolute_image_paths")),
            config.get("mc_mode"), bool(config.get("predict_only")), config.get("gen_kwargs") or None,
            config.get("system_instruction"))}
    except Exception as e:  # noqa: BLE001  (a task that cannot be had here costs its thumbnails, not the report)
        return {}, [f"no thumbnails for {', '.join(wanted)}: {_reason(e)}"]
    out: dict[str, dict[str, list[str]]] = {}
    notices = []
    for name, samples in wanted.items():
        task = tasks.get(name)
        if task is None:
            notices.append(f"no thumbnails for {name}: the run's task list no longer names it")
            continue
        try:
            refs = {r.id: r for r in task.doc_refs()}
            for sample in samples:
                ref = refs.get(sample.get("doc_id"))
                if ref is None or not sample.get("images"):
                    continue
                try:
                    messages = task.request(task.doc(ref), 0).messages
                except DocError:
                    continue  # the doc's image is unreadable: its refs are shown
                uris = [data_uri(p.image) for m in messages for p in m.content if isinstance(p, ImagePart)]
                out.setdefault(name, {})[ref.id] = uris
        except Exception as e:  # noqa: BLE001
            notices.append(f"no thumbnails for {name}: {_reason(e)}")
    return out, notices


def _reason(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def _task_names(run: RunDir, results: dict[str, Any]) -> list[str]:
    names = list(results)
    found = sorted(p.stem for p in run.samples_dir.glob("*.jsonl")) if run.samples_dir.is_dir() else []
    return names + [n for n in found if n not in results]


def _headline(entry: dict[str, Any] | None, samples: list[dict[str, Any]]) -> str | None:
    if entry is not None:
        return entry.get("headline_as")
    for s in samples:  # a run without results yet: the first metric the samples record
        if s.get("metrics"):
            return next(iter(s["metrics"]))
    return None


def _label(root: Path, taken: set[str]) -> str:
    return root.name if root.name not in taken else str(root)


def collect(runs: Sequence[Path], thumbnails: int = 300) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The columnar index of the samples of `runs` and their rows, in run, task and doc order."""
    index: dict[str, Any] = {"runs": [], "tasks": [], "statuses": list(STATUSES), "rules": [], "notices": [],
                             "t": [], "s": [], "r": [], "j": [], "d": [], "chunk": CHUNK}
    rules: dict[str, int] = {}
    rows: list[dict[str, Any]] = []
    for root in runs:
        run = RunDir(Path(root))
        label = _label(run.root, set(index["runs"]))
        index["runs"].append(label)
        results = (run.read_json("results.json") or {}).get("results") or {}
        config = (run.read_json("manifest.json") or {}).get("config") or {}
        tasks = _task_names(run, results)
        picked = {name: sorted(run.completed(name, repair=False).values(), key=lambda s: s.get("doc_index", 0))
                  for name in tasks}
        thumbs, notices = thumbnails_of(config, {n: s[:thumbnails] for n, s in picked.items()} if thumbnails else {})
        index["notices"].extend(f"{label}: {n}" for n in notices)
        for name in tasks:
            samples = picked[name]
            task_id = len(index["tasks"])
            index["tasks"].append([len(index["runs"]) - 1, name])
            by_doc = thumbs.get(name, {})
            for sample, status in zip(samples, statuses(samples, _headline(results.get(name), samples)), strict=True):
                rule = str(sample.get("extract_rule") or "")
                index["t"].append(task_id)
                index["s"].append(STATUSES.index(status))
                index["r"].append(rules.setdefault(rule, len(rules)))
                index["j"].append(judge_score(sample))
                index["d"].append(str(sample.get("doc_id")))
                rows.append(_row(sample, by_doc.get(sample.get("doc_id"))))
    index["rules"] = list(rules)
    return index, rows


def _chunk(rows: list[dict[str, Any]]) -> str:
    data = json.dumps(rows, ensure_ascii=False, default=str, separators=(",", ":")).encode("utf-8")
    return base64.b64encode(gzip.compress(data, compresslevel=5, mtime=0)).decode("ascii")


def _static(name: str) -> str:
    return (files("fastmmeval.report") / "static" / name).read_text(encoding="utf-8")


def samples_section(runs: Sequence[Path], *, thumbnails: int = 300) -> str:
    """The samples browser of the `runs` (run folders) as one HTML fragment, `<section id="samples">` with its own
    style and script; images of the first `thumbnails` samples of each task are shown as thumbnails."""
    index, rows = collect(runs, thumbnails)
    chunks = "".join(f'<script type="application/octet-stream" id="fm-samples-chunk-{k}">'
                     f"{_chunk(rows[start:start + CHUNK])}</script>"
                     for k, start in enumerate(range(0, len(rows), CHUNK)))
    return ('<section id="samples"><h2>Samples</h2>'
            f"<style>{_static('samples.css')}</style>"
            '<div class="fm-samples"><noscript>The samples browser needs JavaScript.</noscript></div>'
            f'<script type="application/json" id="fm-samples-index">{_script_json(index)}</script>{chunks}'
            f"<script>{_static('samples.js')}</script></section>")
