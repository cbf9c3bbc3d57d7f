"""Captioning metrics as pycocoevalcap 1.2 computes them: CIDEr-D, BLEU 1-4, ROUGE-L and METEOR.

Captions are compared as space-separated tokens (PTBTokenizer's output). `tokenize` turns plain
text into such tokens without Java; the metric functions (`cider_d`, `bleu`, `rouge_l`, their
`*_reference` twins, `meteor`) take captions already tokenized, so that they can be checked
against pycocoevalcap on the same input. Scores equal pycocoevalcap's to 1e-9 (float64 in the
same order of operations; in practice they differ by at most a few 1e-16), quirks included:

- CIDEr-D (pycocoevalcap's `Cider`): n = 1..4, sigma = 6, clipped tf-idf, x10; document
  frequencies over the references of the scored images, idf log(N images) - log(max(1, df)); the
  "length" in the Gaussian penalty is the caption's number of bigrams (words - 1), not its words.
- BLEU (`Bleu(4)`, option "closest"): closest reference length (the shorter on a tie); matches
  + 1e-15 over guesses + 1e-9, per image and for the corpus alike.
- ROUGE-L (`Rouge`): beta = 1.2, F-measure of the largest precision and the largest recall over
  the references (not the largest F); an empty caption is one empty word there (it splits on
  " "), so an empty candidate scores 1 against an empty reference.
- METEOR: pycocoevalcap's own `Meteor` (meteor-1.5.jar, needs `java`), not reimplemented.

Deliberate differences from pycocoevalcap:

- ROUGE-L splits captions on any whitespace, like pycocoevalcap's CIDEr and BLEU; pycocoevalcap's
  ROUGE-L splits on single spaces, which differs only for captions with doubled, leading or
  trailing spaces (not PTBTokenizer output; `tokenize` never makes them).
- CIDEr-D of a corpus whose references have no words at all is 0; pycocoevalcap fails (max() of
  no document frequencies).
- The registered metrics tokenize with `tokenize` (pure Python: the same result with or without
  Java), not with PTBTokenizer. It agrees with PTBTokenizer 3.4.1 + punctuation removal on
  ordinary captions (the tests check a set of them), not on every corner of the Stanford lexer:
  known differences are SGML-like tags ("<b>"), "'n'", curly apostrophes before digits, and
  whether a sentence-final initial or "fig."/"no." keeps its period.
- An image needs at least one reference (pycocoevalcap asserts it); an unparsed prediction
  (None) is scored as the empty caption.

Registered metrics: `cider`, `bleu_1`..`bleu_4` (items {"pred", "refs"}, corpus aggregate,
bootstrap stderr), `rouge_l` (per-doc float, mean with analytic stderr: its corpus value is the
mean of per-image scores), `meteor` (items, corpus aggregate by the jar, no stderr: each bootstrap
draw would cost a Java round trip of about 0.5 s per 5,000 images; without Java, scoring or
aggregating it raises ConfigError).

Native code (`_core.CaptionNgrams`, `_core.caption_rouge_l`) takes the corpus as three buffers:
word ids (uint32, one id per distinct word of the corpus), caption starts into them (int64) and
image starts into the captions (int64); each image's first caption is its candidate, the rest its
references. `encode` builds them from strings.
"""

from __future__ import annotations

import math
import shutil
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from fastmmeval import _core
from fastmmeval.errors import ConfigError, DocError
from fastmmeval.metrics.base import METRICS, Metric
from fastmmeval.metrics.ptb_tokenize import tokenize

MAX_ORDER = 4
CIDER_SIGMA = 6.0
ROUGE_BETA = 1.2

# ---------------------------------------------------------------------------------------------
# Native fast path


@dataclass(frozen=True)
class CaptionBuffers:
    """A captioning corpus as native buffers: caption i is `tokens[caption_starts[i]:
    caption_starts[i+1]]`, image j is captions `image_starts[j]..image_starts[j+1]` (the last
    runs to the end), first the candidate, then its references."""

    tokens: np.ndarray
    caption_starts: np.ndarray
    image_starts: np.ndarray


def encode(preds: Sequence[str], refs: Sequence[Sequence[str]]) -> CaptionBuffers:
    """The buffers of candidates `preds[j]` with references `refs[j]` (whitespace-split words,
    numbered by first appearance)."""
    if len(preds) != len(refs):
        raise ValueError(f"{len(preds)} candidates but {len(refs)} reference lists")
    captions = [caption.split() for pred, rs in zip(preds, refs, strict=True) for caption in chain((pred,), rs)]
    lengths = np.fromiter(map(len, captions), dtype=np.int64, count=len(captions))
    caption_starts = np.zeros(len(captions), dtype=np.int64)
    np.cumsum(lengths[:-1], out=caption_starts[1:])
    group_sizes = np.fromiter((1 + len(rs) for rs in refs), dtype=np.int64, count=len(refs))
    image_starts = np.zeros(len(refs), dtype=np.int64)
    np.cumsum(group_sizes[:-1], out=image_starts[1:])
    vocab: defaultdict[str, int] = defaultdict()
    vocab.default_factory = vocab.__len__
    words = list(chain.from_iterable(captions))
    tokens = np.fromiter(map(vocab.__getitem__, words), dtype=np.uint32, count=len(words))
    return CaptionBuffers(tokens, caption_starts, image_starts)


class CaptionScorer:
    """Native CIDEr-D, BLEU and ROUGE-L of one corpus, encoded and n-grammed once; each method
    scores a selection of its images (indices, repeats allowed; None: all) as a corpus."""

    def __init__(self, preds: Sequence[str], refs: Sequence[Sequence[str]]) -> None:
        self.buffers = encode(preds, refs)
        self._ngrams: _core.CaptionNgrams | None = None
        self._rouge: np.ndarray | None = None
        self._lock = threading.Lock()

    def _grams(self) -> _core.CaptionNgrams:
        with self._lock:
            if self._ngrams is None:
                b = self.buffers
                self._ngrams = _core.CaptionNgrams(b.tokens, b.caption_starts, b.image_starts)
            return self._ngrams

    def cider_d(self, images: np.ndarray | None = None) -> np.ndarray:
        """CIDEr-D of each selected image, document frequencies over the selection."""
        return self._grams().cider(images, CIDER_SIGMA)

    def bleu(self, images: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(corpus BLEU-1..4 of the selection [4], BLEU-1..4 of each selected image [n, 4])."""
        return self._grams().bleu(images)

    def rouge_l(self, images: np.ndarray | None = None) -> np.ndarray:
        """ROUGE-L of each selected image."""
        with self._lock:
            if self._rouge is None:
                b = self.buffers
                self._rouge = _core.caption_rouge_l(b.tokens, b.caption_starts, b.image_starts, ROUGE_BETA)
        return self._rouge if images is None else self._rouge[images]


def cider_d(preds: Sequence[str], refs: Sequence[Sequence[str]]) -> tuple[float, np.ndarray]:
    """(corpus CIDEr-D, per-image CIDEr-D) of tokenized candidates against their references."""
    scores = CaptionScorer(preds, refs).cider_d()
    return float(np.mean(scores)), scores


def bleu(preds: Sequence[str], refs: Sequence[Sequence[str]]) -> tuple[list[float], np.ndarray]:
    """(corpus BLEU-1..4, per-image BLEU-1..4 [n, 4]) of tokenized candidates against their references."""
    corpus, per_image = CaptionScorer(preds, refs).bleu()
    return [float(v) for v in corpus], per_image


def rouge_l(preds: Sequence[str], refs: Sequence[Sequence[str]]) -> tuple[float, np.ndarray]:
    """(mean ROUGE-L, per-image ROUGE-L) of tokenized candidates against their references."""
    scores = CaptionScorer(preds, refs).rouge_l()
    return float(np.mean(scores)), scores


# ---------------------------------------------------------------------------------------------
# Pure-Python references (the same formulas, plainly)


def _ngram_counts(words: Sequence[str], max_order: int = MAX_ORDER) -> Counter[tuple[str, ...]]:
    """Counts of the caption's n-grams of every order 1..max_order."""
    return Counter(tuple(words[i : i + k]) for k in range(1, max_order + 1) for i in range(len(words) - k + 1))


def cider_d_reference(preds: Sequence[str], refs: Sequence[Sequence[str]]) -> tuple[float, list[float]]:
    """Pure-Python twin of `cider_d`."""
    cand_counts = [_ngram_counts(p.split()) for p in preds]
    ref_counts = [[_ngram_counts(r.split()) for r in rs] for rs in refs]
    df = Counter(g for counts in ref_counts for g in set().union(*counts))
    log_n = math.log(len(preds))

    def tfidf(counts: Counter[tuple[str, ...]]) -> tuple[list[dict[tuple[str, ...], float]], list[float]]:
        vectors: list[dict[tuple[str, ...], float]] = [{} for _ in range(MAX_ORDER)]
        for gram, tf in counts.items():
            vectors[len(gram) - 1][gram] = tf * (log_n - math.log(max(1.0, df[gram])))
        norms = [math.sqrt(sum(v * v for v in vec.values())) for vec in vectors]
        return vectors, norms

    def bigrams(caption: str) -> int:
        return max(0, len(caption.split()) - 1)

    scores = []
    for pred, cand, rs, ref_cs in zip(preds, cand_counts, refs, ref_counts, strict=True):
        cand_vecs, cand_norms = tfidf(cand)
        per_order = [0.0] * MAX_ORDER
        for ref, ref_c in zip(rs, ref_cs, strict=True):
            ref_vecs, ref_norms = tfidf(ref_c)
            delta = bigrams(pred) - bigrams(ref)
            penalty = math.e ** (-(delta**2) / (2 * CIDER_SIGMA**2))
            for k in range(MAX_ORDER):
                dot = sum(min(w, ref_vecs[k].get(g, 0.0)) * ref_vecs[k].get(g, 0.0) for g, w in cand_vecs[k].items())
                if cand_norms[k] != 0 and ref_norms[k] != 0:
                    dot /= cand_norms[k] * ref_norms[k]
                per_order[k] += dot * penalty
        scores.append(sum(per_order) / MAX_ORDER / len(rs) * 10.0)
    return sum(scores) / len(scores), scores


def _bleu_from_stats(test_len: int, ref_len: int, guesses: Sequence[int], matches: Sequence[int]) -> list[float]:
    """BLEU-1..4 from lengths, guesses and clipped matches, smoothed as pycocoevalcap does."""
    scores, product = [], 1.0
    for k in range(MAX_ORDER):
        product *= (matches[k] + 1e-15) / (guesses[k] + 1e-9)
        scores.append(product ** (1.0 / (k + 1)))
    ratio = (test_len + 1e-15) / (ref_len + 1e-9)
    if ratio < 1:
        scores = [s * math.exp(1 - 1 / ratio) for s in scores]
    return scores


def bleu_reference(preds: Sequence[str], refs: Sequence[Sequence[str]]) -> tuple[list[float], list[list[float]]]:
    """Pure-Python twin of `bleu`."""
    stats = []  # per image: candidate length, closest reference length, guesses, clipped matches
    for pred, rs in zip(preds, refs, strict=True):
        words = pred.split()
        ref_lengths = [len(r.split()) for r in rs]
        closest = min(ref_lengths, key=lambda n: (abs(n - len(words)), n))
        max_ref: Counter[tuple[str, ...]] = Counter()
        for r in rs:
            max_ref |= _ngram_counts(r.split())
        matched: Counter[int] = Counter()
        for gram, count in _ngram_counts(words).items():
            matched[len(gram)] += min(count, max_ref[gram])
        guesses = [max(0, len(words) - k) for k in range(MAX_ORDER)]
        stats.append((len(words), closest, guesses, [matched[k + 1] for k in range(MAX_ORDER)]))
    per_image = [_bleu_from_stats(*s) for s in stats]
    corpus = _bleu_from_stats(
        sum(s[0] for s in stats),
        sum(s[1] for s in stats),
        [sum(s[2][k] for s in stats) for k in range(MAX_ORDER)],
        [sum(s[3][k] for s in stats) for k in range(MAX_ORDER)],
    )
    return corpus, per_image


def _lcs(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of two word lists."""
    row = [0] * (len(b) + 1)
    for x in a:
        diagonal = 0
        for j, y in enumerate(b):
            diagonal, row[j + 1] = row[j + 1], diagonal + 1 if x == y else max(row[j + 1], row[j])
    return row[-1]


def rouge_l_reference(preds: Sequence[str], refs: Sequence[Sequence[str]]) -> tuple[float, list[float]]:
    """Pure-Python twin of `rouge_l`."""
    scores = []
    for pred, rs in zip(preds, refs, strict=True):
        cand = pred.split() or [""]
        lcs = [(_lcs(cand, r.split() or [""]), len(r.split() or [""])) for r in rs]
        precision = max(common / len(cand) for common, _ in lcs)
        recall = max(common / length for common, length in lcs)
        if precision == 0 or recall == 0:
            scores.append(0.0)
        else:
            scores.append((1 + ROUGE_BETA**2) * precision * recall / (recall + ROUGE_BETA**2 * precision))
    return sum(scores) / len(scores), scores


# ---------------------------------------------------------------------------------------------
# METEOR through pycocoevalcap's jar

_meteor_lock = threading.Lock()
_meteor_scorer: Any = None


def meteor_unavailable() -> str | None:
    """Why METEOR cannot run here (no Java, no pycocoevalcap), or None when it can."""
    if shutil.which("java") is None:
        return (
            "METEOR runs pycocoevalcap's meteor-1.5.jar and needs Java: put `java` on PATH "
            "(e.g. apt-get install default-jre-headless)"
        )
    try:
        import pycocoevalcap.meteor.meteor  # noqa: F401
    except ImportError:
        return "METEOR runs pycocoevalcap's meteor-1.5.jar: pip install pycocoevalcap==1.2"
    return None


def meteor(preds: Sequence[str], refs: Sequence[Sequence[str]]) -> tuple[float, list[float]]:
    """(corpus METEOR, per-image METEOR) from pycocoevalcap's Meteor (one Java process, kept for
    later calls); ConfigError when Java or pycocoevalcap is missing."""
    problem = meteor_unavailable()
    if problem is not None:
        raise ConfigError(problem)
    if any("\n" in c or "\r" in c for c in chain(preds, chain.from_iterable(refs))):
        raise ValueError("METEOR captions must be single lines (the jar reads one line per segment)")
    gts = {i: list(rs) for i, rs in enumerate(refs)}
    res = {i: [p] for i, p in enumerate(preds)}
    score, scores = meteor_scorer().compute_score(gts, res)  # Meteor's own lock serializes calls
    return float(score), [float(s) for s in scores]


def meteor_scorer() -> Any:
    """pycocoevalcap's `Meteor` that scores METEOR here: one Java process, started on first use
    (loading its paraphrase table takes seconds) and kept for later calls."""
    from pycocoevalcap.meteor.meteor import Meteor

    global _meteor_scorer
    with _meteor_lock:
        if _meteor_scorer is None:
            _meteor_scorer = Meteor()
        return _meteor_scorer


# ---------------------------------------------------------------------------------------------
# Registered metrics


def caption_item(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any] | None = None) -> dict:
    """The per-doc item of the corpus caption metrics: {"pred": tokenized prediction ("" when
    unparsed), "refs": tokenized reference captions}."""
    if not targets:
        raise DocError("caption metrics need at least one reference caption")
    return {"pred": tokenize(prediction or ""), "refs": [tokenize(t) for t in targets]}


def rouge_l_score(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any] | None = None) -> float:
    """ROUGE-L of one tokenized prediction against its tokenized references (a per-image score,
    so the corpus value is the mean, with an analytic stderr)."""
    item = caption_item(prediction, targets)
    return float(rouge_l([item["pred"]], [item["refs"]])[1][0])


class _Corpus:
    """The scorer of the last item list aggregated, and each item's image index in it, so that
    bootstrap draws from that list (the same item objects) are scored by index instead of being
    re-encoded. Holding the items keeps their ids unique while cached."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[Any] = []
        self._index: dict[int, int] = {}
        self._scorer: CaptionScorer | None = None

    def select(self, items: Sequence[Mapping[str, Any]]) -> tuple[CaptionScorer, np.ndarray]:
        """(scorer, image indices of `items`), encoding the items when they are not all cached."""
        with self._lock:
            if self._scorer is not None:
                try:
                    selected = np.fromiter(map(self._index.__getitem__, map(id, items)), np.int64, len(items))
                except KeyError:
                    pass
                else:
                    return self._scorer, selected
            self._scorer = CaptionScorer([it["pred"] for it in items], [it["refs"] for it in items])
            self._items = list(items)
            self._index = {id(item): j for j, item in enumerate(self._items)}
            return self._scorer, np.arange(len(items), dtype=np.int64)


_CORPUS = _Corpus()


def aggregate_cider(items: Sequence[Mapping[str, Any]]) -> float:
    """Corpus CIDEr-D of caption items."""
    scorer, selected = _CORPUS.select(items)
    return float(np.mean(scorer.cider_d(selected)))


def aggregate_bleu(order: int) -> Callable[[Sequence[Mapping[str, Any]]], float]:
    """The aggregate of BLEU-`order`: corpus BLEU of caption items."""

    def aggregate(items: Sequence[Mapping[str, Any]]) -> float:
        scorer, selected = _CORPUS.select(items)
        return float(scorer.bleu(selected)[0][order - 1])

    aggregate.__doc__ = f"Corpus BLEU-{order} of caption items."
    return aggregate


def aggregate_meteor(items: Sequence[Mapping[str, Any]]) -> float:
    """Corpus METEOR of caption items (pycocoevalcap's jar)."""
    return meteor([it["pred"] for it in items], [it["refs"] for it in items])[0]


def meteor_item(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any] | None = None) -> dict:
    """`caption_item`, after checking that METEOR can run (ConfigError otherwise)."""
    problem = meteor_unavailable()
    if problem is not None:
        raise ConfigError(problem)
    return caption_item(prediction, targets)


def cider_to_100(value: float) -> float:
    """CIDEr-D on 0-100: x100 as papers report it, capped at 100 (CIDEr-D tops out at 10; strong
    models score above 1 on COCO, so the cap keeps one captioning task from outweighing others)."""
    return min(100.0, 100.0 * value)


METRICS.add("cider", Metric("cider", caption_item, aggregate_cider, stderr="bootstrap", to_100=cider_to_100))
for _order in range(1, MAX_ORDER + 1):
    METRICS.add(f"bleu_{_order}", Metric(f"bleu_{_order}", caption_item, aggregate_bleu(_order), stderr="bootstrap"))
METRICS.add("rouge_l", Metric("rouge_l", rouge_l_score))
METRICS.add("meteor", Metric("meteor", meteor_item, aggregate_meteor, stderr="none", unavailable=meteor_unavailable))
