"""The benchmark side of a scan: each doc's question text (every text part of its rendered prompt) and
images, tokenized and hashed into n-gram windows."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
from tqdm import tqdm

from fastmmeval.contam.ngram.hashing import IMAGE_SEED, TEXT_SEED, ngram_hashes
from fastmmeval.errors import DocError
from fastmmeval.pools import ordered_map
from fastmmeval.protocol import ImagePart, TextPart
from fastmmeval.tasks.task import Task
from fastmmeval.util import available_cores

IMAGE_BATCH = 64


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


def text_instance(task: str, doc_id: str, question: str, text_tokenizer: Any, n: int) -> Instance:
    """An instance of question text alone: its tokens, their spans and its n-gram windows."""
    ids, spans = text_tokenizer.encode_spans(question)
    return Instance(task, doc_id, question, ids, spans, _window_hashes(ids, n, TEXT_SEED))


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
            if error is not None:
                out.append(Instance(task.name, ref.id, error=error))
                continue
            inst = text_instance(task.name, ref.id, question, text_tokenizer, n)
            out.append(inst)
            if image_tokenizer is not None:
                pending.append((inst, images))
                if sum(len(ims) for _, ims in pending) >= IMAGE_BATCH:
                    flush()
    if pending:
        flush()
    return out
