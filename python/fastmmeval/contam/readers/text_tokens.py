"""Text tokenizers for contamination audits: tokenizer-independent `words`, or any Hugging Face tokenizer.

Both give uint32 token ids and, for the benchmark side, the character span of each token (so a report can
show the matched text). Each has a fingerprint that is stored in the index meta: a scan refuses an index
built with another tokenizer, since its n-grams would never match.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import xxhash

from fastmmeval import _core
from fastmmeval.contam.ngram.settings import concat_arrays
from fastmmeval.errors import ConfigError

# Letters and digits in any script; everything else (punctuation, symbols, whitespace) separates words.
WORD = re.compile(r"[^\W_]+", re.UNICODE)
WORDS_VERSION = 1
_WORD_HASH_SEED = 0x5EED_0001
_CODE_POINTS = 0x110000
# The bits of a word_table entry above the lower-case code point (as cpp/text/words.hpp).
_SPECIAL_LOWER, _CASE_IGNORABLE, _CASED, _WORD_CHAR = 1 << 21, 1 << 29, 1 << 30, 1 << 31
_SIGMA, _FINAL_SIGMA, _DOTTED_I = 0x3A3, 0x3C2, 0x130


def _lower_each(chars: np.ndarray, width: int) -> np.ndarray:
    """`str.lower()` of a string of code points that keeps its length, as code points, one row per `width`."""
    text = chars.astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")
    return np.frombuffer(text.lower().encode("utf-32-le", "surrogatepass"), dtype="<u4").reshape(-1, width)


@functools.lru_cache(maxsize=1)
def word_table() -> np.ndarray:
    """The table the native split reads, one uint32 per code point, all taken from this Python: its lower case
    (`str.lower()`, one code point) in the low 21 bits; whether `WORD` takes it as a word character; for
    word characters, whether it is case-ignorable and whether it is cased (what decides between a final and
    a non-final sigma); and a flag on U+0130 (lowers to two code points) and U+03A3 (by its neighbours)."""
    codes = np.arange(_CODE_POINTS, dtype=np.uint32)
    every = "".join(map(chr, range(_CODE_POINTS)))
    table = codes.copy()
    # Lower-cased in two pieces around U+0130, so that every other character keeps its position.
    table[:_DOTTED_I] = _lower_each(codes[:_DOTTED_I], 1)[:, 0]
    table[_DOTTED_I + 1 :] = _lower_each(codes[_DOTTED_I + 1 :], 1)[:, 0]
    table[[_DOTTED_I, _SIGMA]] = _SPECIAL_LOWER
    words = np.zeros(_CODE_POINTS, dtype=bool)
    for m in WORD.finditer(every):
        words[m.start() : m.end()] = True
    table[words] |= _WORD_CHAR
    # Probes of the Final_Sigma rule: 'cΣ' lowers to a final sigma when c is cased and not case-ignorable,
    # 'AcΣ' when c is case-ignorable or cased (the spaces between probes are neither).
    probed = codes[words & (codes != _DOTTED_I)]
    space, sigma, cap_a = np.full_like(probed, 0x20), np.full_like(probed, _SIGMA), np.full_like(probed, ord("A"))
    cased = _lower_each(np.stack([probed, sigma, space], axis=1), 3)[:, 1] == _FINAL_SIGMA
    either = _lower_each(np.stack([cap_a, probed, sigma, space], axis=1), 4)[:, 2] == _FINAL_SIGMA
    table[probed[cased]] |= _CASED
    table[probed[either & ~cased]] |= _CASE_IGNORABLE
    table[_DOTTED_I] |= _CASED if (chr(_DOTTED_I) + chr(_SIGMA)).lower().endswith(chr(_FINAL_SIGMA)) else 0
    return table


def word_id(word: str) -> int:
    """The id of one word: XXH32 of its lower-cased UTF-8 bytes."""
    return xxhash.xxh32_intdigest(word.lower().encode("utf-8", "surrogatepass"), seed=_WORD_HASH_SEED)


def reference_word_ids(texts: Sequence[str]) -> list[np.ndarray]:
    """The `words` tokenizer's ids of each text in pure Python (the regex's words, lower-cased, XXH32): the
    reference the tests hold the native split to."""
    return [np.array([word_id(w) for w in WORD.findall(t)], dtype=np.uint32) for t in texts]


class TextTokenizer(Protocol):
    """Text -> uint32 token ids; picklable (shard sources carry one to Ray workers)."""

    name: str

    @property
    def fingerprint(self) -> str:
        """Changes whenever the same text could map to other ids."""
        ...

    def encode(self, texts: Sequence[str]) -> list[np.ndarray]:
        """The token ids of each text (uint32)."""
        ...

    def encode_concat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The token ids of all texts, one after another (uint32), and where each text's ids start (int64)."""
        ...

    def encode_spans(self, text: str) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """The token ids of one text and the (start, end) character span of each."""
        ...


class WordTokenizer:
    """Lower-cased words (runs of letters and digits; punctuation and underscores separate them), each mapped
    to a stable uint32 by XXH32: the same words give the same ids on every machine and for every model."""

    name = "words"

    @property
    def fingerprint(self) -> str:
        """`words-v<version>`: the rule and the hash seed are fixed per version."""
        return f"words-v{WORDS_VERSION}"

    @property
    def unicode_version(self) -> str:
        """The Unicode database that decides what a word character is and how it lower-cases: the running
        Python's (its regex and `str.lower`), so a newer Python may split text with newly assigned or
        re-classified characters differently."""
        return unicodedata.unidata_version

    def encode_concat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The word ids of all texts, one after another, and where each text's ids start (split, lower-cased
        and hashed natively: `_core.word_ids`, GIL released)."""
        return _core.word_ids(texts, word_table(), _WORD_HASH_SEED)

    def encode(self, texts: Sequence[str]) -> list[np.ndarray]:
        """The word ids of each text."""
        ids, offsets = self.encode_concat(texts)
        return np.split(ids, offsets[1:]) if len(texts) else []

    def encode_spans(self, text: str) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """Word ids and the span of each word in `text` (the regex finds the same words as the native split)."""
        return self.encode([text])[0], [m.span() for m in WORD.finditer(text)]


class HFTextTokenizer:
    """A Hugging Face tokenizer by hub name or local folder (loaded on first use, no special tokens added)."""

    def __init__(self, name_or_path: str) -> None:
        self.name = name_or_path
        self._tok: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"name": self.name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.name = state["name"]
        self._tok = None

    @property
    def tokenizer(self) -> Any:
        """The loaded `transformers` tokenizer."""
        if self._tok is None:
            from transformers import AutoTokenizer

            try:
                self._tok = AutoTokenizer.from_pretrained(self.name)
            except (OSError, ValueError) as e:
                raise ConfigError(f"--text_tokenizer {self.name}: cannot load a Hugging Face tokenizer: {e}") from None
        return self._tok

    @property
    def fingerprint(self) -> str:
        """`hf:<class>:<hash of the vocabulary and normalizer>`."""
        tok = self.tokenizer
        blob = json.dumps(sorted(tok.get_vocab().items()), ensure_ascii=False)
        backend = getattr(tok, "backend_tokenizer", None)
        if backend is not None:
            state = json.loads(backend.to_str())
            parts = [state.get("normalizer"), state.get("pre_tokenizer"), state.get("model", {}).get("type")]
            blob += json.dumps(parts)
        return f"hf:{type(tok).__name__}:{hashlib.sha256(blob.encode()).hexdigest()[:16]}"

    def encode(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids of each text."""
        if not texts:
            return []
        out = self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        return [np.asarray(ids, dtype=np.uint32) for ids in out]

    def encode_concat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of all texts, one after another, and where each text's ids start."""
        return concat_arrays(self.encode(texts))

    def encode_spans(self, text: str) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """Token ids and character spans (fast tokenizers; slow ones give empty spans)."""
        tok = self.tokenizer
        if getattr(tok, "is_fast", False):
            enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
            return np.asarray(enc["input_ids"], dtype=np.uint32), [tuple(s) for s in enc["offset_mapping"]]
        ids = np.asarray(tok(text, add_special_tokens=False)["input_ids"], dtype=np.uint32)
        return ids, [(0, 0)] * len(ids)


def make_text_tokenizer(spec: str) -> WordTokenizer | HFTextTokenizer:
    """`words` (the default) or a Hugging Face tokenizer name or folder."""
    if spec == "words":
        return WordTokenizer()
    if not spec:
        raise ConfigError("--text_tokenizer is empty (use `words` or a Hugging Face tokenizer name or folder)")
    return HFTextTokenizer(str(Path(spec).resolve()) if Path(spec).is_dir() else spec)
