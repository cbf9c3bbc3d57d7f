"""A seeded synthetic corpus of u16 tokens for the contamination benches, written out of core.

Tokens follow a Zipf law over a vocabulary (ids 1..vocab, never 0 or the 0xFFFF separator), and a bank
of phrases with Zipf popularity is pasted over the text so that 8-gram counts span from 1 to many
thousands, as boilerplate does in real training data. Documents have log-normal lengths. The corpus is
written chunk by chunk as pre-tokenized shards of `SHARD_TOKENS` tokens (`shard-00000.u16` plus
`shard-00000.u16.offsets`, the layout `contam.ngram.token_shards.TokenShardSource` reads), so any prefix of whole
shards is itself a corpus; `write_infini_gram_files` writes the same documents in infini-gram's layout.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

CHUNK_TOKENS = 1 << 23
SHARD_TOKENS = 25_000_000
PHRASE_LEN = 24
PHRASES = 4096
PHRASE_EVERY = 64  # one phrase pasted per this many tokens, on average


@dataclass(frozen=True)
class ZipfSpec:
    """What to generate: total tokens, vocabulary, Zipf exponent, mean document length, seed."""

    tokens: int
    vocab: int = 50_000
    exponent: float = 1.1
    mean_doc_len: int = 600
    seed: int = 0


def _zipf_cdf(size: int, exponent: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, size + 1, dtype=np.float64) ** exponent
    return np.cumsum(weights) / weights.sum()


def _draw(rng: np.random.Generator, cdf: np.ndarray, size: int) -> np.ndarray:
    return np.minimum(np.searchsorted(cdf, rng.random(size)), len(cdf) - 1)


def phrase_bank(spec: ZipfSpec) -> np.ndarray:
    """The pasted phrases, (PHRASES, PHRASE_LEN) u16; phrase 0 is the most popular."""
    rng = np.random.default_rng([spec.seed, 1])
    tokens = _draw(rng, _zipf_cdf(spec.vocab, spec.exponent), PHRASES * PHRASE_LEN) + 1
    return tokens.astype(np.uint16).reshape(PHRASES, PHRASE_LEN)


def _chunk(rng: np.random.Generator, spec: ZipfSpec, size: int, cdfs: tuple, bank: np.ndarray) -> tuple:
    """`size` tokens with pasted phrases, and the offsets of the documents they form (first 0)."""
    token_cdf, phrase_cdf = cdfs
    chunk = (_draw(rng, token_cdf, size) + 1).astype(np.uint16)
    starts = rng.integers(0, max(size - PHRASE_LEN, 1), size=size // PHRASE_EVERY)
    window = np.minimum(starts[:, None] + np.arange(PHRASE_LEN), size - 1)
    chunk[window] = bank[_draw(rng, phrase_cdf, len(starts))]
    sigma = 1.0
    lengths = rng.lognormal(np.log(spec.mean_doc_len) - sigma**2 / 2, sigma, size=4 * size // spec.mean_doc_len + 16)
    ends = np.cumsum(lengths.astype(np.int64))
    return chunk, np.concatenate([[0], ends[ends < size]]).astype(np.int64)


def write_corpus(spec: ZipfSpec, folder: Path) -> list[Path]:
    """Write the corpus as shards under `folder` and return the shard token files in order. A finished corpus
    already there is reused when `spec` is it or a prefix of whole shards of it."""
    folder.mkdir(parents=True, exist_ok=True)
    shards = [folder / f"shard-{i:05d}.u16" for i in range(-(-spec.tokens // SHARD_TOKENS))]
    done = folder / "spec.json"
    if done.exists():
        have = ZipfSpec(**json.loads(done.read_text()))
        whole = spec.tokens == have.tokens or (spec.tokens < have.tokens and spec.tokens % SHARD_TOKENS == 0)
        if whole and asdict(have) == {**asdict(spec), "tokens": have.tokens}:
            return shards
    done.unlink(missing_ok=True)
    rng = np.random.default_rng(spec.seed)
    cdfs = (_zipf_cdf(spec.vocab, spec.exponent), _zipf_cdf(PHRASES, 1.0))
    bank = phrase_bank(spec)
    for i, path in enumerate(shards):
        size = min(SHARD_TOKENS, spec.tokens - i * SHARD_TOKENS)
        with open(path, "wb") as tok_f, open(path.with_name(path.name + ".offsets"), "wb") as off_f:
            for begin in range(0, size, CHUNK_TOKENS):
                chunk, offsets = _chunk(rng, spec, min(CHUNK_TOKENS, size - begin), cdfs, bank)
                chunk.tofile(tok_f)
                (offsets + begin).tofile(off_f)
    done.write_text(json.dumps(asdict(spec)))
    return shards


def write_infini_gram_files(shards: list[Path], save_dir: Path) -> None:
    """Write infini-gram's `tokenized.0` (per document 0xFFFF then its tokens) and `offset.0` (the u64 byte
    offset of each document) for the documents of `shards`, one shard in memory at a time."""
    save_dir.mkdir(parents=True, exist_ok=True)
    byte_pos = 0
    with open(save_dir / "tokenized.0", "wb") as tok_f, open(save_dir / "offset.0", "wb") as off_f:
        for path in shards:
            tokens = np.fromfile(path, dtype=np.uint16)
            starts = np.fromfile(path.with_name(path.name + ".offsets"), dtype=np.int64)
            out = np.insert(tokens, starts, np.uint16(0xFFFF))
            lengths = np.diff(np.append(starts, len(tokens))) + 1
            (byte_pos + 2 * np.concatenate([[0], np.cumsum(lengths[:-1])])).astype(np.uint64).tofile(off_f)
            out.tofile(tok_f)
            byte_pos += 2 * len(out)
