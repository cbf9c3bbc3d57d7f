"""A streaming audit without an index: a corpus streamed past the query n-grams, counting them and naming the
training documents that hold them."""

from __future__ import annotations

import itertools
import queue
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from tqdm import tqdm

from fastmmeval import _core
from fastmmeval.contam.ngram.settings import IndexSettings, ShardSource, TokenBlock, check_block


def stream_counts(
    query_hashes: np.ndarray, sources: Sequence[ShardSource], settings: IndexSettings, max_ids: int = 3,
    progress: bool = False,
) -> tuple[np.ndarray, list[list[str]]]:
    """Counts (uint8, saturated like the index) of each query hash in the corpus streamed past it, and up to
    max_ids training ids of documents containing it (the first ones in corpus order)."""
    queries = np.ascontiguousarray(query_hashes, dtype=np.uint64)
    uniq, inverse = np.unique(queries, return_inverse=True)
    streams = [
        _core.NgramStream(uniq, settings.n, settings.threshold, settings.dedup_docs, max_ids)
        for _ in range(settings.threads)
    ]
    free: queue.SimpleQueue = queue.SimpleQueue()
    for s in streams:
        free.put(s)
    hits: list[tuple[int, int, int, str]] = []  # (block number, doc, query, id)

    def work(stream: Any, number: int, block: TokenBlock, tok: np.ndarray, offs: np.ndarray) -> None:
        try:
            found = stream.process(tok, offs, int(block.seed))
        finally:
            free.put(stream)
        hits.extend((number, int(d), int(q), str(block.ids[int(d)])) for q, d in found)

    number = itertools.count()
    with (
        ThreadPoolExecutor(settings.threads) as pool,
        tqdm(desc="stream", unit="tok", unit_scale=True, disable=not progress) as bar,
    ):
        futures = []
        for source in sources:
            for i, block in enumerate(source.blocks()):
                tok, offs = check_block(block, f"{source.name} block {i}")
                stream = free.get()  # at most `threads` blocks in flight
                for f in [f for f in futures if f.done()]:
                    f.result()  # raises a worker's error now rather than at the end
                    futures.remove(f)
                futures.append(pool.submit(work, stream, next(number), block, tok, offs))
                bar.update(len(tok))
        for f in futures:
            f.result()
    total = np.zeros(len(uniq), np.int64)
    for s in streams:
        total += s.counts
    ids_of: list[list[str]] = [[] for _ in range(len(uniq))]
    for _, _, q, doc_id in sorted(hits):
        if len(ids_of[q]) < max_ids:
            ids_of[q].append(doc_id)
    counts = np.minimum(total, settings.cap).astype(np.uint8)
    return counts[inverse], [list(ids_of[q]) for q in inverse]
