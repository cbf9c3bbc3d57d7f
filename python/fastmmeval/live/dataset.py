"""Pipeline step 5: a month's dataset in lmms-eval's LiveBench schema (the features of its tool's
`LiveBenchData`: id, images, website, question, answer, criteria, subtask, data_generator, checker,
date_time, screen_shoter, screen_size, score, reason, scorer_name) plus provenance columns, written as
`test.parquet`, a `save_to_disk` copy in `hf/` and `manifest.json`, so that lmms-lab's published months and
ours load the same way (`load_month`)."""

from __future__ import annotations

import json
import math
import secrets
import shutil
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fastmmeval.errors import ConfigError
from fastmmeval.live.records import Capture, Draft, Item, Score, Source, check_month
from fastmmeval.live.review import DECISIONS
from fastmmeval.live.select import Selection, listing_key
from fastmmeval.live.store import Blobs, sha256_hex
from fastmmeval.util import write_json_atomic


def livebench_features() -> Any:
    """lmms-eval's LiveBench features (tools/live_bench/live_bench/data_generator/live_bench_data.py)."""
    import datasets

    text = datasets.Value("string")
    return datasets.Features({
        "id": datasets.Value("int32"), "images": datasets.Sequence(datasets.Image()), "website": text,
        "question": text, "answer": text, "criteria": text, "subtask": text, "data_generator": text, "checker": text,
        "date_time": text, "screen_shoter": text, "screen_size": text, "score": datasets.Value("int32"),
        "reason": text, "scorer_name": text,
    })  # fmt: skip


def month_features() -> Any:
    """Our months' features: lmms-eval's, then where each item came from (source, final URL, HTTP status, the
    capture's blobs), who finalized it, its exact score and the prompt versions, and its pipeline id."""
    import datasets

    text = datasets.Value("string")
    provenance = {
        "item_id": text, "source_name": text, "source_category": text, "source_language": text, "final_url": text,
        "http_status": datasets.Value("int32"), "screen_sha256": datasets.Sequence(text), "text_sha256": text,
        "html_sha256": text, "finalizer": text, "score_total": datasets.Value("float64"),
        "prompts": datasets.Sequence(text),
    }  # fmt: skip
    return datasets.Features({**livebench_features(), **provenance})


def _row(row_id: int, item: Item, blobs: Blobs, prompts: list[str]) -> dict[str, Any]:
    draft, score = Draft.from_record(item.draft), Score.from_record(item.score)
    capture = Capture.from_record(item.capture)
    source = Source.from_record(capture.source)
    return {
        "id": row_id,
        "images": [{"bytes": blobs.get(sha, ".png"), "path": None} for sha in capture.screens],
        # lmms-eval's tool wrote its Website.get_info() here: url, name and subject.
        "website": json.dumps({"url": source.url, "name": source.name, "subject": source.category}, ensure_ascii=False),
        "question": draft.question,
        "answer": draft.answer,
        "criteria": draft.criteria,
        "subtask": draft.subtask,
        "data_generator": item.generator,
        "checker": item.checker if item.checked else None,
        "date_time": capture.captured_at,
        "screen_shoter": capture.mode,
        "screen_size": capture.screen_size,
        "score": math.floor(score.total + 0.5),
        "reason": score.reason,
        "scorer_name": item.scorer,
        "item_id": item.id,
        "source_name": source.name,
        "source_category": source.category,
        "source_language": source.language,
        "final_url": capture.final_url,
        "http_status": capture.status,
        "screen_sha256": list(capture.screens),
        "text_sha256": capture.text_sha,
        "html_sha256": capture.html_sha,
        "finalizer": item.finalizer,
        "score_total": score.total,
        "prompts": prompts,
    }


def _chosen(items: Sequence[Item], selection: Selection, decisions: Mapping[str, str]) -> tuple[list[Item], dict]:
    """The items to export (selected, plus accepted, less rejected) and what the decisions changed."""
    by_id = {i.id: i for i in items}
    for item_id, decision in decisions.items():
        if item_id not in by_id:
            raise ConfigError(f"decisions: {item_id!r} is not an item of this month")
        if decision not in DECISIONS:
            raise ConfigError(f"decisions: item {item_id}: expected accept or reject, got {decision!r}")
    selected = set(selection.kept)
    unknown = selected - set(by_id)
    if unknown:
        raise ConfigError(f"selection: kept item {min(unknown)!r} is not among the items given")
    accepted = sorted(k for k, d in decisions.items() if d == "accept" and k not in selected)
    rejected = sorted(k for k, d in decisions.items() if d == "reject" and k in selected)
    chosen = (selected | set(accepted)) - set(rejected)
    rows = sorted((by_id[k] for k in chosen), key=listing_key)
    return rows, {"selected": len(selected), "accepted": accepted, "rejected": rejected}


def _is_export(folder: Path) -> bool:
    try:
        return "export" in json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return False


def _publish(tmp: Path, out_dir: Path) -> None:
    """Put the finished folder `tmp` at `out_dir` by renames, moving a previous export aside first."""
    if not out_dir.exists():
        tmp.rename(out_dir)
        return
    old = out_dir.with_name(f".{out_dir.name}.{secrets.token_hex(6)}.old")
    out_dir.rename(old)
    tmp.rename(out_dir)
    shutil.rmtree(old)


def write_export(
    out_dir: Path,
    data: Any,
    parquet: str,
    manifest: Mapping[str, Any],
    export: Mapping[str, Any],
    what: str,
    files: Mapping[str, bytes] | None = None,
) -> Path:
    """Write the dataset `data` into `out_dir` as the parquet file `parquet`, a `save_to_disk` copy in
    `hf/`, `files` (name -> bytes) and manifest.json (`manifest` plus "export": `export` and the parquet
    file's sha256). The folder appears whole (built beside it, then renamed into place) and the same
    inputs give the same bytes. `out_dir` must be new, empty or an earlier export (else a ConfigError
    naming `what`, e.g. "a month's export"). Returns `out_dir`."""
    if out_dir.exists() and any(out_dir.iterdir()) and not _is_export(out_dir):
        raise ConfigError(f"{out_dir}: exists and holds something other than {what}; give a new folder")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    for stale in (*out_dir.parent.glob(f".{out_dir.name}.*.tmp"), *out_dir.parent.glob(f".{out_dir.name}.*.old")):
        shutil.rmtree(stale, ignore_errors=True)  # left by an export that was killed
    tmp = out_dir.with_name(f".{out_dir.name}.{secrets.token_hex(6)}.tmp")
    try:
        tmp.mkdir()
        data.to_parquet(str(tmp / parquet))
        data.save_to_disk(str(tmp / "hf"))
        for name, content in (files or {}).items():
            (tmp / name).write_bytes(content)
        digest = sha256_hex((tmp / parquet).read_bytes())
        write_json_atomic(tmp / "manifest.json", {**manifest, "export": {**export, parquet: digest}})
        _publish(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def export_month(
    items: Sequence[Item],
    blobs: Blobs,
    month: str,
    out_dir: Path,
    manifest: dict[str, Any],
    decisions: Mapping[str, str] | None = None,
    *,
    selection: Selection,
) -> Path:
    """Write month `month` (YYYY-MM) into `out_dir`: the items `selection` keeps out of `items` (all the
    month's items), plus those `decisions` accept, less those it rejects, as `test.parquet`, `hf/` and
    `manifest.json` (`manifest`, whose "prompts" maps prompt ids to hashes, plus the export's counts). The
    folder appears whole (built beside it, then renamed into place); the same inputs give the same bytes.
    `out_dir` must be new, empty or an earlier export. Returns `out_dir`."""
    import datasets

    check_month(month)
    if not isinstance(manifest.get("prompts"), Mapping):
        raise ConfigError("live export: the manifest has no 'prompts' (prompt id -> sha256)")
    rows, changes = _chosen(items, selection, decisions or {})
    prompts = list(manifest["prompts"])
    data = datasets.Dataset.from_list(
        [_row(k, item, blobs, prompts) for k, item in enumerate(rows)], features=month_features()
    )
    export = {
        "month": month,
        "items": len(items),
        **changes,
        "rows": len(rows),
        "by_subtask": dict(Counter(Draft.from_record(i.draft).subtask for i in rows)),
    }
    return write_export(out_dir, data, "test.parquet", manifest, export, "a month's export")


def load_month(path: Path) -> Any:
    """A month as a `datasets.Dataset`: a parquet file, a folder of parquet files (lmms-lab's published
    `YYYY-MM/test-*.parquet`, or our export, read from its `test.parquet`), or a `save_to_disk` folder (our
    `hf/`; a DatasetDict gives its "test" split)."""
    import datasets

    if (path / "state.json").is_file() or (path / "dataset_dict.json").is_file():
        data = datasets.load_from_disk(str(path))
        return data["test"] if isinstance(data, datasets.DatasetDict) else data
    files = [path] if path.is_file() else sorted(path.glob("*.parquet")) if path.is_dir() else []
    if not files:
        raise ConfigError(f"{path}: not a LiveBench month (no parquet file and no save_to_disk folder)")
    return datasets.load_dataset("parquet", data_files={"test": [str(f) for f in files]}, split="test")
