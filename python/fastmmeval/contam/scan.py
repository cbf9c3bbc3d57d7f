"""Scan benchmark tasks against a training corpus: per-instance text and image n-gram overlap, near-duplicates.

An instance's question text is the text of its rendered prompt (every text part of its messages, as the
model sees it: question, options and instructions, joined by newlines); its images are the images of the
prompt. Both are tokenized with the tokenizers the index was built with. For each modality:

    total    = n-gram windows of the instance (images: summed over its images)
    frequent = windows seen more than `threshold` times in the training data ("meaningless", skipped)
    present  = windows seen 1..threshold times
    fraction = present / (total - frequent)   (None when every window is frequent or there is none)

An instance is flagged when it has a present window in its text or in one of its images. Counts come from
an index (`index.counts`) or, without one, from streaming the corpus past the benchmark n-grams. With the
corpus at hand the training ids behind each match are found by streaming it once more (restricted to the
matched hashes, the images' tokens read back from the index's image cache where it still describes the
shard), and near-duplicate questions are found in the same pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
from tqdm import tqdm

from fastmmeval.contam.corpus import RecordSource, with_image_cache, without_images
from fastmmeval.contam.hashing import IMAGE_SEED, TEXT_SEED, ngram_hashes
from fastmmeval.contam.index import stream_counts
from fastmmeval.contam.near_dup import NearDupFinder
from fastmmeval.contam.settings import IndexSettings, ShardSource, TokenBlock
from fastmmeval.errors import ConfigError, DocError
from fastmmeval.pools import ordered_map
from fastmmeval.protocol import ImagePart, TextPart
from fastmmeval.tasks.task import Task
from fastmmeval.util import available_cores

IMAGE_BATCH = 64
TOP_EXAMPLES = 5


@dataclass
class Instance:
    """One benchmark doc's question text, tokens and n-gram hashes (or why it could not be read)."""

    task: str
    doc_id: str
    question: str = ""
    text_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint32))
    text_spans: list[tuple[int, int]] = field(default_factory=list)
    text_hashes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    image_hashes: list[np.ndarray] = field(default_factory=list)
    error: str | None = None


def _window_hashes(tokens: np.ndarray, n: int, seed: int) -> np.ndarray:
    return ngram_hashes(np.asarray(tokens, np.uint32), np.zeros(1, np.int64), n, seed)


def _read_doc(task: Task, image_tokenizer: Any, ref: Any) -> tuple[str | None, str, list[np.ndarray]]:
    """(why the doc cannot be read, or None; its question text; its images prepared for the image tokenizer)."""
    try:
        request = task.request(task.doc(ref), 0)
    except DocError as e:
        return str(e), "", []
    parts = [p for m in request.messages for p in m.content]
    question = "\n".join(p.text for p in parts if isinstance(p, TextPart))
    if image_tokenizer is None:
        return None, question, []
    return None, question, [image_tokenizer.prepare(p.image) for p in parts if isinstance(p, ImagePart)]


def read_instances(
    task: Task, text_tokenizer: Any, image_tokenizer: Any, n: int, limit: int | None = None, progress: bool = True
) -> list[Instance]:
    """Every doc of `task` as an Instance; docs are read and their images decoded and prepared on a pool of
    threads (in order, a few ahead), then tokenized in batches and not kept."""
    out: list[Instance] = []
    pending: list[tuple[Instance, list[np.ndarray]]] = []

    def flush() -> None:
        prepared = [im for _, ims in pending for im in ims]
        tokens = image_tokenizer.encode_prepared(prepared) if prepared else np.zeros((0, 0), np.uint32)
        k = 0
        for inst, ims in pending:
            rows = tokens[k : k + len(ims)]
            # Windows that cannot tell images apart (e.g. the offline tokenizer's all-neutral ones) are not
            # looked up: two unrelated flat images would otherwise "overlap".
            inst.image_hashes = [
                _window_hashes(row, n, IMAGE_SEED)[image_tokenizer.informative_windows(row, n)] for row in rows
            ]
            k += len(ims)
        pending.clear()

    refs = task.doc_refs(limit)
    workers = available_cores()
    with ThreadPoolExecutor(workers) as pool:
        docs = ordered_map(pool, partial(_read_doc, task, image_tokenizer), refs, ahead=4 * workers)
        for ref, (error, question, images) in tqdm(
            zip(refs, docs, strict=True), total=len(refs), desc=f"read {task.name}", unit="doc", disable=not progress
        ):
            inst = Instance(task.name, ref.id)
            out.append(inst)
            if error is not None:
                inst.error = error
                continue
            inst.question = question
            inst.text_ids, inst.text_spans = text_tokenizer.encode_spans(question)
            inst.text_hashes = _window_hashes(inst.text_ids, n, TEXT_SEED)
            if image_tokenizer is not None:
                pending.append((inst, images))
                if sum(len(ims) for _, ims in pending) >= IMAGE_BATCH:
                    flush()
    if pending:
        flush()
    return out


class _Tap:
    """A shard source that also hands each block it yields to a callback (near-duplicate search rides along
    the streaming pass instead of reading the corpus twice)."""

    def __init__(self, source: ShardSource, callback: Callable[[TokenBlock], None]) -> None:
        self.source = source
        self.name = source.name
        self.callback = callback

    def blocks(self) -> Iterator[TokenBlock]:
        """The wrapped source's blocks, each also given to the callback."""
        for block in self.source.blocks():
            self.callback(block)
            yield block

    def missing_images(self) -> int:
        """The wrapped source's count."""
        return self.source.missing_images()


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


@dataclass
class ScanOptions:
    """How to scan: n-gram settings (from the index, or given for a streaming audit), ids kept per match,
    the near-duplicate threshold (None: no near-duplicate search), doc limit, progress bars, and whether the
    corpus's image tokens may be read from the index's image cache instead of tokenizing its images again."""

    settings: IndexSettings = field(default_factory=IndexSettings)
    max_ids: int = 3
    near_dup_threshold: float | None = 0.6
    limit: int | None = None
    progress: bool = True
    image_cache: bool = True


def scan(
    tasks: Sequence[Task],
    text_tokenizer: Any,
    image_tokenizer: Any,
    options: ScanOptions,
    index: Any = None,
    corpus: Sequence[ShardSource] | None = None,
) -> dict[str, Any]:
    """Scan `tasks` against an index (`NgramIndex`) and/or a corpus (streamed); at least one is needed.
    Returns {"tasks": {name: summary with "instances"}, "corpus": {...}}."""
    if index is None and not corpus:
        raise ConfigError("contam scan needs an index (--index) or a corpus to stream (--corpus)")
    settings = options.settings
    instances = {
        t.name: read_instances(t, text_tokenizer, image_tokenizer, settings.n, options.limit, options.progress)
        for t in tasks
    }
    every = [i for insts in instances.values() for i in insts if i.error is None]
    image_parts = [h for i in every for h in i.image_hashes]
    parts = [i.text_hashes for i in every] + image_parts
    queries = np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.uint64)

    ids_by_hash: dict[int, list[str]] | None = None
    corpus_info: dict[str, Any] = {}
    sources = list(corpus or [])
    images_read = image_tokenizer is not None
    if index is not None:
        counts = index.counts(queries) if len(queries) else np.zeros(0, np.uint8)
        corpus_info["index"] = {k: index.stats()[k] for k in ("tokens", "docs", "missing_images")}
        matched = queries[(counts > 0) & (counts <= settings.threshold)]
        # Naming the training ids of matches streams the corpus again; its images (decoding them, and with
        # SEED the model again) are only worth reading if some image n-gram matched.
        images_read = bool(image_parts) and bool(np.isin(matched, np.concatenate(image_parts)).any())
        if not images_read:
            sources = [s for s in map(without_images, sources) if s is not None]
        elif options.image_cache:
            sources = [with_image_cache(s, index.image_cache()) for s in sources]

    finder = None
    if sources and options.near_dup_threshold is not None:
        finder = NearDupFinder(options.near_dup_threshold, options.max_ids)
        finder.add_questions([(f"{i.task}\0{i.doc_id}", i.text_ids) for i in every])
    streamed = [_Tap(s, finder.feed) for s in sources] if finder else sources

    if index is not None:
        if streamed:
            _, ids = stream_counts(matched, streamed, settings, options.max_ids, progress=options.progress)
            ids_by_hash = {int(h): i for h, i in zip(matched, ids, strict=True)}
    else:
        counts, ids = stream_counts(queries, streamed, settings, options.max_ids, progress=options.progress)
        ids_by_hash = {int(h): i for h, i in zip(queries, ids, strict=True) if i}
    if streamed:
        corpus_info["streamed"] = {
            "shards": len(streamed),
            "images_read": images_read,
            "missing_images": sum(s.missing_images() for s in streamed) if images_read else None,
        }
        states = [s.cache_state() for s in sources if isinstance(s, RecordSource)]
        if any(states):
            corpus_info["streamed"]["image_cache"] = {k: states.count(k) for k in ("read", "stale", "absent")}
    count_of = dict(zip(queries.tolist(), counts.astype(np.int64).tolist(), strict=True))

    report: dict[str, Any] = {"tasks": {}, "corpus": corpus_info}
    for name, insts in instances.items():
        entries = [
            score_instance(
                i,
                count_of,
                settings,
                ids_by_hash,
                None if finder is None else finder.matches.get(f"{i.task}\0{i.doc_id}", []),
                options.max_ids,
            )
            for i in insts
        ]
        report["tasks"][name] = {**summarize_task(name, entries, finder is not None), "instance_results": entries}
    return report
