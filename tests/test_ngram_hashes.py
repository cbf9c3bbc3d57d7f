"""_core.ngram_hashes against the xxhash reference."""

import numpy as np
import pytest
from native_checks import releases_gil

from fastmmeval import _core
from fastmmeval.contam.ngram.hashing import ngram_hashes, ngram_hashes_reference


def random_corpus(rng: np.random.Generator, n_docs: int, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    lengths = rng.integers(0, max_len, size=n_docs)
    tokens = rng.integers(0, 2**32, size=int(lengths.sum()), dtype=np.uint32)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return tokens, offsets


@pytest.mark.parametrize("n", [1, 2, 8, 13])
@pytest.mark.parametrize("seed", [0, 1, 2**64 - 1])
def test_native_matches_xxhash_reference_on_random_documents(n: int, seed: int) -> None:
    tokens, offsets = random_corpus(np.random.default_rng(n), n_docs=50, max_len=40)
    got = ngram_hashes(tokens, offsets, n=n, seed=seed)
    assert got.dtype == np.uint64
    np.testing.assert_array_equal(got, ngram_hashes_reference(tokens, offsets, n=n, seed=seed))


def test_8_grams_of_long_documents_match_the_reference() -> None:
    # n=8 hashes 8 windows at a time (AVX-512 where the CPU has it), in chunks of 2048: lengths around both.
    lengths = np.array([7, 8, 9, 14, 15, 16, 17, 23, 2047, 2054, 2055, 2056, 2063, 4111, 5000], dtype=np.int64)
    tokens = np.random.default_rng(8).integers(0, 2**32, size=int(lengths.sum()), dtype=np.uint32)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    for seed in (0, 2**64 - 1):
        np.testing.assert_array_equal(
            ngram_hashes(tokens, offsets, n=8, seed=seed), ngram_hashes_reference(tokens, offsets, n=8, seed=seed)
        )


def test_windows_never_cross_documents_and_short_documents_give_none() -> None:
    tokens = np.arange(1, 12, dtype=np.uint32)
    offsets = np.array([0, 0, 3, 3, 10], dtype=np.int64)  # empty, 3 tokens, empty, 7 tokens, 1 token
    got = ngram_hashes(tokens, offsets, n=4)
    assert len(got) == 4  # only the 7-token document has 4-windows
    np.testing.assert_array_equal(got, ngram_hashes_reference(tokens, offsets, n=4))


def test_n1_hashes_each_token_and_empty_input_gives_empty() -> None:
    tokens = np.array([7, 8, 9], dtype=np.uint32)
    np.testing.assert_array_equal(ngram_hashes(tokens, [0, 2], n=1), ngram_hashes_reference(tokens, [0, 2], n=1))
    assert len(ngram_hashes(np.array([], np.uint32), np.array([], np.int64))) == 0


def test_hash_is_of_little_endian_window_bytes() -> None:
    import xxhash

    tokens = np.array([1, 2, 3], dtype=np.uint32)
    expected = xxhash.xxh3_64_intdigest(b"\x01\0\0\0\x02\0\0\0\x03\0\0\0", seed=5)
    assert int(ngram_hashes(tokens, [0], n=3, seed=5)[0]) == expected


@pytest.mark.parametrize(
    ("offsets", "message"),
    [([1], "must be 0"), ([0, 5, 3], "non-decreasing"), ([0, 99], "past the end"), ([], "empty")],
)
def test_bad_offsets_are_named_in_the_error(offsets: list[int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _core.ngram_hashes(np.arange(10, dtype=np.uint32), np.array(offsets, dtype=np.int64))


def test_wrong_token_dtype_is_refused_not_truncated() -> None:
    with pytest.raises(TypeError):
        _core.ngram_hashes(np.arange(10, dtype=np.int64), np.array([0], dtype=np.int64))


def test_native_call_releases_the_gil() -> None:
    tokens = np.random.default_rng(0).integers(0, 2**32, size=10_000_000, dtype=np.uint32)
    assert releases_gil(lambda: _core.ngram_hashes(tokens, np.array([0], dtype=np.int64), 8, 0))
