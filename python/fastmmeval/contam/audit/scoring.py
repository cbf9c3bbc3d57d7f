"""What a scan reports: an instance's entry from the counts of its n-grams (present, frequent, the matched
text, the training ids), and a task's summary."""

from __future__ import annotations

from typing import Any

import numpy as np

from fastmmeval.contam.audit.instances import Instance
from fastmmeval.contam.ngram.settings import IndexSettings

TOP_EXAMPLES = 5


def _matched_text(question: str, spans: list[tuple[int, int]], present: np.ndarray, n: int) -> list[str]:
    """The question's substrings covered by present windows, overlapping windows merged."""
    runs: list[list[int]] = []
    for j in np.flatnonzero(present):
        start, end = spans[j][0], spans[j + n - 1][1]
        if runs and start <= runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], end)
        else:
            runs.append([start, end])
    return [question[s:e] for s, e in runs if e > s]


def _modality(counts: np.ndarray, threshold: int) -> dict[str, Any]:
    frequent = int(np.count_nonzero(counts > threshold))
    present = int(np.count_nonzero((counts > 0) & (counts <= threshold)))
    total = len(counts)
    return {
        "ngrams": total,
        "frequent": frequent,
        "present": present,
        "fraction": present / (total - frequent) if total > frequent else None,
    }


def _ids_of(hashes: np.ndarray, mask: np.ndarray, ids_by_hash: dict[int, list[str]], max_ids: int) -> list[str]:
    out: list[str] = []
    for h in hashes[mask]:
        for i in ids_by_hash.get(int(h), ()):
            if i not in out:
                out.append(i)
    return out[:max_ids]


def score_instance(
    inst: Instance,
    count_of: dict[int, int],
    settings: IndexSettings,
    ids_by_hash: dict[int, list[str]] | None,
    near_dups: list[tuple[str, float]] | None,
    max_ids: int,
) -> dict[str, Any]:
    """The report entry of one instance."""
    if inst.error is not None:
        return {"doc_id": inst.doc_id, "error": inst.error, "flagged": False}
    t = settings.threshold
    text_counts = np.array([count_of[int(h)] for h in inst.text_hashes], dtype=np.int64)
    text = _modality(text_counts, t)
    text_present = (text_counts > 0) & (text_counts <= t)
    text["matched"] = _matched_text(inst.question, inst.text_spans, text_present, settings.n)
    image_counts = [np.array([count_of[int(h)] for h in hs], dtype=np.int64) for hs in inst.image_hashes]
    image = _modality(np.concatenate(image_counts) if image_counts else np.zeros(0, np.int64), t)
    image["images"] = len(inst.image_hashes)
    image["overlapping_images"] = sum(bool(np.any((c > 0) & (c <= t))) for c in image_counts)
    if ids_by_hash is not None:
        text["training_ids"] = _ids_of(inst.text_hashes, text_present, ids_by_hash, max_ids)
        all_image = np.concatenate(inst.image_hashes) if inst.image_hashes else np.zeros(0, np.uint64)
        all_counts = np.concatenate(image_counts) if image_counts else np.zeros(0, np.int64)
        image["training_ids"] = _ids_of(all_image, (all_counts > 0) & (all_counts <= t), ids_by_hash, max_ids)
    entry: dict[str, Any] = {
        "doc_id": inst.doc_id,
        "flagged": text["present"] > 0 or image["present"] > 0,
        "text_overlap": text["present"] > 0,
        "image_overlap": image["present"] > 0,
        "text": text,
        "image": image,
    }
    if near_dups is not None:
        entry["near_duplicates"] = [{"training_id": i, "jaccard": round(s, 4)} for i, s in near_dups]
    entry["question"] = inst.question
    return entry


def _share(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def summarize_task(name: str, entries: list[dict[str, Any]], with_near_dup: bool) -> dict[str, Any]:
    """Per-task shares, skipped frequent n-grams and the top examples."""
    ok = [e for e in entries if e.get("error") is None]
    with_images = [e for e in ok if e["image"]["images"]]
    fractions = [e["text"]["fraction"] for e in ok if e["text"]["fraction"] is not None]
    ranked = sorted(
        (e for e in ok if e["flagged"] or e.get("near_duplicates")),
        key=lambda e: (-(e["text"]["fraction"] or 0.0), -e["image"]["present"], e["doc_id"]),
    )
    return {
        "task": name,
        "instances": len(entries),
        "errors": len(entries) - len(ok),
        "flagged": sum(e["flagged"] for e in ok),
        "text_overlap_share": _share([e["text_overlap"] for e in ok]),
        "image_overlap_share": _share([e["image_overlap"] for e in with_images]),
        "near_duplicate_share": _share([bool(e["near_duplicates"]) for e in ok]) if with_near_dup else None,
        "any_overlap_share": _share([e["flagged"] or bool(e.get("near_duplicates")) for e in ok]),
        "mean_text_fraction": float(np.mean(fractions)) if fractions else None,
        "frequent_text_ngrams_skipped": sum(e["text"]["frequent"] for e in ok),
        "frequent_image_ngrams_skipped": sum(e["image"]["frequent"] for e in ok),
        "top_examples": [
            {k: e[k] for k in ("doc_id", "question", "text", "image", "near_duplicates") if k in e}
            for e in ranked[:TOP_EXAMPLES]
        ],
    }
