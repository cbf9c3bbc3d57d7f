"""What acquisition drops after retrieval: perceptual duplicates within the acquired set (pHash within a
Hamming distance, the first one kept) and near-copies of the original benchmark's images, found with the
contamination audit's image tokens: an image becomes 32 tokens, its 8-token windows are hashed as a scan
hashes them, and a candidate sharing at least `min_windows` informative windows with the original images
is a copy (one, as a scan counts an overlap: docs/contam.md has the measured rates). The originals are
an in-memory index (`NearCopies.from_images`) or a contamination index built over them (`from_index`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from fastmmeval.contam.ngram.hashing import IMAGE_SEED, ngram_hashes
from fastmmeval.contam.ngram.settings import IndexSettings
from fastmmeval.contam.readers.image_tokens import ImageTokenizer, make_image_tokenizer
from fastmmeval.contam.readers.tokenizers import recorded_image_spec
from fastmmeval.errors import ConfigError
from fastmmeval.evolve.records import Candidate
from fastmmeval.live.store import Blobs

# Two candidates whose 64-bit pHashes differ in at most this many bits are one picture: a resize or a
# re-encode moves a couple of bits; distinct drawn test scenes are 8 or more apart.
PHASH_DISTANCE = 6
BATCH = 64


class NearCopies:
    """The original benchmark's images as hashed image-token windows: `is_copy(image)` says whether an
    image is a near-copy of one of them. `lookup(hashes)` gives, per window hash, whether it is present
    (and not frequent) among the originals and, where known, which original holds it."""

    def __init__(self, tokenizer: ImageTokenizer, lookup: Callable[[np.ndarray], tuple[np.ndarray, list[str]]],
                 where: str, n: int = 8, min_windows: int = 1) -> None:
        if min_windows < 1:
            raise ConfigError(f"near-copy min_windows must be at least 1, got {min_windows}")
        self.tokenizer = tokenizer
        self.lookup = lookup
        self.where = where
        self.n = n
        self.min_windows = min_windows

    @classmethod
    def from_images(cls, images: Iterable[tuple[str, Image.Image]], tokenizer: str = "offline",
                    min_windows: int = 1, frequent: int = IndexSettings.threshold) -> NearCopies:
        """An in-memory index of (id, image) pairs, tokenized `BATCH` at a time; a window held by more than
        `frequent` originals says nothing about any one of them and is left out, as a scan does."""
        tok = make_image_tokenizer(tokenizer)
        if tok is None:
            raise ConfigError("near-copies need an image tokenizer, not 'none'")
        n = IndexSettings.n
        counts: dict[int, int] = {}
        first: dict[int, str] = {}
        batch: list[tuple[str, np.ndarray]] = []

        def flush() -> None:
            tokens = tok.encode_prepared([p for _, p in batch])
            for (key, _), row in zip(batch, tokens, strict=True):
                for h in set(_windows(tok, row, n).tolist()):
                    counts[h] = counts.get(h, 0) + 1
                    first.setdefault(h, key)
            batch.clear()

        for key, image in images:
            batch.append((key, tok.prepare(image)))
            if len(batch) >= BATCH:
                flush()
        if batch:
            flush()

        def lookup(hashes: np.ndarray) -> tuple[np.ndarray, list[str]]:
            present = np.array([0 < counts.get(int(h), 0) <= frequent for h in hashes], bool)
            return present, [first[int(h)] for h in hashes[present]]

        return cls(tok, lookup, f"the {len(set(first.values()))} original images", n, min_windows)

    @classmethod
    def from_index(cls, path: Path | str, min_windows: int = 1) -> NearCopies:
        """The originals as a contamination index folder (`fastmmeval contam index` over them), read with
        the image tokenizer and n-gram settings it was built with."""
        from fastmmeval.contam.ngram.index import NgramIndex

        index = NgramIndex.open(path)
        recorded = index.meta.get("image_tokenizer")
        tok = make_image_tokenizer(recorded_image_spec(recorded)) if recorded else None
        if tok is None:
            raise ConfigError(f"{path}: the contamination index was built without image tokens")
        threshold = index.settings.threshold

        def lookup(hashes: np.ndarray) -> tuple[np.ndarray, list[str]]:
            counts = index.counts(hashes) if len(hashes) else np.zeros(0, np.uint8)
            return (counts > 0) & (counts <= threshold), []

        return cls(tok, lookup, f"the contamination index {path}", index.settings.n, min_windows)

    def is_copy(self, image: Image.Image) -> str | None:
        """Why `image` is a near-copy of an original (the windows shared, the original named where known),
        or None."""
        hashes = _windows(self.tokenizer, self.tokenizer.encode([image])[0], self.n)
        present, owners = self.lookup(hashes)
        shared = int(np.count_nonzero(present))
        if shared < self.min_windows:
            return None
        of = f"image {owners[0]!r} of " if owners else "an image in "
        return f"a near-copy of {of}{self.where} ({shared} of {len(hashes)} image {self.n}-grams shared)"


def _windows(tok: Any, row: np.ndarray, n: int) -> np.ndarray:
    """The hashes of one image's informative n-token windows, as a scan looks them up."""
    hashes = ngram_hashes(np.asarray(row, np.uint32), np.zeros(1, np.int64), n, IMAGE_SEED)
    return hashes[tok.informative_windows(row, n)]


def drop_duplicates(candidates: Sequence[Candidate], blobs: Blobs, near_copies: NearCopies | None = None,
                    max_distance: int = PHASH_DISTANCE) -> tuple[list[Candidate], list[dict[str, str]]]:
    """The candidates kept (in order) and those dropped as {sha, reason}: a candidate within `max_distance`
    pHash bits of one kept before it, or a near-copy of the original benchmark's images."""
    import imagehash

    kept: list[tuple[Candidate, Any]] = []
    dropped: list[dict[str, str]] = []
    for candidate in candidates:
        phash = imagehash.hex_to_hash(candidate.phash)
        twin = next(((k, phash - h) for k, h in kept if phash - h <= max_distance), None)
        if twin is not None:
            reason = f"a perceptual duplicate of {twin[0].sha[:12]} ({twin[1]} bits apart)"
            dropped.append({"sha": candidate.sha, "reason": reason})
            continue
        if near_copies is not None:
            with Image.open(blobs.path(candidate.sha, candidate.suffix)) as image:
                copy = near_copies.is_copy(image)
            if copy:
                dropped.append({"sha": candidate.sha, "reason": copy})
                continue
        kept.append((candidate, phash))
    return [k for k, _ in kept], dropped
