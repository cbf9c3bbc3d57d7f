"""Pipeline step 4: which finished items make the month. Items scored at or above the threshold are kept,
as evenly across the four SUBTASKS as the supply allows and best-scored first, after dropping the ones the
contamination index flags, near-duplicates of an earlier month's question and near-duplicates of a better
item of this month (MinHash over word bigrams, character bigrams in Chinese and Japanese). Every item not
kept is listed with why."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fastmmeval.contam.audit.near_dup import MinHashIndex, shingles
from fastmmeval.contam.readers.text_tokens import word_id
from fastmmeval.errors import ConfigError
from fastmmeval.live.records import SUBTASKS, Draft, Item, Score
from fastmmeval.live.store import content_key

NEAR_DUP_THRESHOLD = 0.6
# Why an item was not kept, in the order the rules apply.
REASONS = ("below_threshold", "unknown_subtask", "contaminated", "earlier_month", "near_duplicate", "over_size")
# Han and kana: scripts written without spaces between words, so each character is a token of its own.
_UNSPACED = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(f"[{_UNSPACED}]|[^\\W_{_UNSPACED}]+")


@dataclass(frozen=True)
class Dropped:
    """Why an item was not kept: one of REASONS, in words, and the id of the item (or `earlier:<k>`, the
    k-th earlier question) it duplicates."""

    reason: str
    detail: str
    of: str | None = None


@dataclass
class Selection:
    """The ids of the kept items (by subtask in SUBTASKS order, then best-scored first) and, for every
    other item, why it was not kept."""

    kept: list[str]
    dropped: dict[str, Dropped]

    def counts(self) -> dict[str, int]:
        """How many were kept and how many dropped for each reason (every reason listed)."""
        by_reason = Counter(d.reason for d in self.dropped.values())
        return {"kept": len(self.kept), **{r: by_reason[r] for r in REASONS}}

    def record(self) -> dict[str, Any]:
        """The JSON-able form."""
        return {"kept": list(self.kept), "dropped": {k: asdict(d) for k, d in self.dropped.items()}}

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> Selection:
        """Back from `record()`."""
        return cls(list(data["kept"]), {k: Dropped(**d) for k, d in data["dropped"].items()})


def question_shingles(text: str) -> np.ndarray:
    """The bigram shingles of a question: pairs of words, and pairs of characters in Han and kana text
    (after NFKC, so full-width letters are the ASCII ones; case-folded like contam's `words`)."""
    tokens = _TOKEN.findall(unicodedata.normalize("NFKC", text))
    return shingles(np.array([word_id(t) for t in tokens], dtype=np.uint32))


def _draft(item: Item) -> Draft:
    return Draft.from_record(item.draft)


def _total(item: Item) -> float:
    return Score.from_record(item.score).total


def _subtask_order(item: Item) -> int:
    subtask = _draft(item).subtask
    return SUBTASKS.index(subtask) if subtask in SUBTASKS else len(SUBTASKS)


def listing_key(item: Item) -> tuple[int, float, str]:
    """The order items are listed in (a selection, the review page, the dataset): by subtask in SUBTASKS
    order, best-scored first, then by id."""
    return _subtask_order(item), -_total(item), item.id


def _contaminated(items: Sequence[Item], index_path: Path) -> dict[str, str]:
    """Item id -> the question text the index has seen, for every item whose question it flags."""
    # The scan brings in the tasks package: imported only when there is an index to scan against.
    from fastmmeval.contam.audit.instances import text_instance
    from fastmmeval.contam.audit.scan import ScanOptions, scan_instances
    from fastmmeval.contam.ngram.index import NgramIndex
    from fastmmeval.contam.readers.tokenizers import index_tokenizers

    index = NgramIndex.open(index_path)
    text = index_tokenizers(index.meta, image_spec="none").text
    instances = [text_instance("live", item.id, _draft(item).question, text, index.settings.n) for item in items]
    options = ScanOptions(settings=index.settings, near_dup_threshold=None, progress=False)
    entries = scan_instances({"live": instances}, None, options, index=index)["tasks"]["live"]["instance_results"]
    return {e["doc_id"]: " / ".join(e["text"]["matched"]) for e in entries if e["flagged"]}


def _balanced(ranked: list[Item], size: int) -> list[Item]:
    """Up to `size` of `ranked` (best first), taken one at a time from the subtask that has the fewest
    so far among those with items left, the better next item first when counts tie."""
    queues = {s: [i for i in ranked if _draft(i).subtask == s] for s in SUBTASKS}
    position = {i.id: k for k, i in enumerate(ranked)}
    taken: dict[str, int] = dict.fromkeys(SUBTASKS, 0)
    out: list[Item] = []
    while len(out) < size:
        open_ = [s for s in SUBTASKS if taken[s] < len(queues[s])]
        if not open_:
            break
        s = min(open_, key=lambda s: (taken[s], position[queues[s][taken[s]].id]))
        out.append(queues[s][taken[s]])
        taken[s] += 1
    return out


def select_items(
    items: Sequence[Item],
    threshold: float,
    size: int,
    seed: int,
    earlier: Sequence[str] = (),
    contam_index: Path | None = None,
    near_dup_threshold: float = NEAR_DUP_THRESHOLD,
) -> Selection:
    """Choose the month's items: at or above `threshold` (a score out of 10), not flagged by the n-gram index
    at `contam_index` (a `fastmmeval contam index` folder), not near-duplicates (estimated Jaccard of
    question shingles >= `near_dup_threshold`) of an `earlier` month's question or of a better item, at most
    `size` of them balanced across SUBTASKS; `seed` breaks ties between equal scores. Every item not kept
    is in `dropped` with its reason."""
    if size < 1:
        raise ConfigError(f"live select: size must be at least 1 (got {size})")
    if not 0 <= threshold <= 10:
        raise ConfigError(f"live select: threshold is a score out of 10 (got {threshold})")
    ids = Counter(i.id for i in items)
    if any(n > 1 for n in ids.values()):
        raise ConfigError(f"live select: item {next(k for k, n in ids.items() if n > 1)} is given twice")
    dropped: dict[str, Dropped] = {}
    ranked = sorted(items, key=lambda i: (-_total(i), content_key("select", seed, i.id)))
    candidates = []
    for item in ranked:
        subtask = _draft(item).subtask
        if _total(item) < threshold:
            dropped[item.id] = Dropped("below_threshold", f"score {_total(item):g} < threshold {threshold:g}")
        elif subtask not in SUBTASKS:
            dropped[item.id] = Dropped("unknown_subtask", f"subtask {subtask!r} is not one of {', '.join(SUBTASKS)}")
        else:
            candidates.append(item)
    if contam_index is not None and candidates:
        flagged = _contaminated(candidates, contam_index)
        for item in candidates:
            if item.id in flagged:
                dropped[item.id] = Dropped("contaminated", f"the contamination index has seen: {flagged[item.id]}")
        candidates = [i for i in candidates if i.id not in flagged]

    previous = MinHashIndex(near_dup_threshold)
    for k, question in enumerate(earlier):
        if len(found := question_shingles(question)):
            previous.add(f"earlier:{k}", found)
    month = MinHashIndex(near_dup_threshold)
    unique = []
    for item in candidates:
        found = question_shingles(_draft(item).question)
        if len(found) and (hits := previous.query(found)):
            key, score = hits[0]
            text = earlier[int(key.split(":")[1])]
            detail = f"near-duplicate (Jaccard {score:.2f}) of an earlier month's question: {text[:200]}"
            dropped[item.id] = Dropped("earlier_month", detail, key)
        elif len(found) and (hits := month.query(found)):
            key, score = hits[0]
            dropped[item.id] = Dropped("near_duplicate", f"near-duplicate (Jaccard {score:.2f}) of item {key}", key)
        else:
            if len(found):
                month.add(item.id, found)
            unique.append(item)

    kept = _balanced(unique, size)
    chosen = {i.id for i in kept}
    for item in unique:
        if item.id not in chosen:
            dropped[item.id] = Dropped("over_size", f"beyond the {size} items kept, balanced across subtasks")
    return Selection([i.id for i in sorted(kept, key=listing_key)], dict(sorted(dropped.items())))
