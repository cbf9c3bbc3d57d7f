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

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fastmmeval.contam.audit.instances import Instance, read_instances
from fastmmeval.contam.audit.near_dup import NearDupFinder
from fastmmeval.contam.audit.scoring import score_instance, summarize_task
from fastmmeval.contam.ngram.image_cache import with_image_cache
from fastmmeval.contam.ngram.settings import IndexSettings, ShardSource, TokenBlock
from fastmmeval.contam.ngram.stream import stream_counts
from fastmmeval.contam.readers.shards import RecordSource, without_images
from fastmmeval.errors import ConfigError
from fastmmeval.tasks.task import Task


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
    instances = {
        t.name: read_instances(t, text_tokenizer, image_tokenizer, options.settings.n, options.limit, options.progress)
        for t in tasks
    }
    return scan_instances(instances, image_tokenizer, options, index, corpus)


def scan_instances(
    instances: Mapping[str, list[Instance]],
    image_tokenizer: Any,
    options: ScanOptions,
    index: Any = None,
    corpus: Sequence[ShardSource] | None = None,
) -> dict[str, Any]:
    """`scan` of instances already read (by task name), e.g. questions that are no task's docs
    (`text_instance`); the report has the same form."""
    settings = options.settings
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
