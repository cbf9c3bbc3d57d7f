"""fastmmeval native core (numpy buffers in, numpy buffers out)"""

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

class CaptionNgrams:
    """The 1- to 4-grams of a captioning corpus, interned once, for CIDEr-D and BLEU over any selection of its
    images (repeats allowed)."""

    def __init__(
        self, tokens: NDArray[np.uint32], caption_starts: NDArray[np.int64], image_starts: NDArray[np.int64]
    ) -> None: ...
    @property
    def n_images(self) -> int: ...
    def cider(self, images: NDArray[np.int64] | None = None, sigma: float = 6.0) -> NDArray[np.float64]:
        """Per selected image CIDEr-D as pycocoevalcap 1.2 (document frequencies over the selection's
        references)."""
    def bleu(self, images: NDArray[np.int64] | None = None) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """BLEU 1..4 as pycocoevalcap 1.2 (closest reference length): (corpus float64[4], per image float64[n, 4])
        for the selected images (int64 indices, None for all)."""

class NgramMapper:
    """The map step of an n-gram index build: hashes the windows of each document, scatters them by the top
    partition_bits hash bits, and spills each full partition bucket as a sorted run of counts saturated at
    threshold + 1 (a segment file named <prefix>p<partition:05d>-<seq:06d>.run) so buckets and sort buffers stay
    within memory_bytes; spilled partitions are sorted and written on `threads` threads."""

    def __init__(
        self,
        prefix: str,
        n: int,
        threshold: int,
        partition_bits: int,
        dedup: bool,
        memory_bytes: int,
        threads: int = 1,
    ) -> None: ...
    def add(self, tokens: NDArray[np.uint16] | NDArray[np.uint32], doc_offsets: NDArray[np.int64], seed: int) -> None:
        """Adds whole documents (uint16 or uint32 tokens, hashed as uint32 like ngram_hashes)."""
    def finish(self, alone_prefix: str = "") -> list[str]:
        """Spills what is left; returns the paths of all runs written."""
    @property
    def windows(self) -> int: ...
    @property
    def dropped(self) -> int:
        """Windows dropped as copies of a hash whose count saturated within the sampled first windows (they
        change no count)."""

class NgramSegment:
    """A segment file of an n-gram index, memory-mapped for lookups."""

    def __init__(self, path: str, verify: bool = True) -> None: ...
    @property
    def path(self) -> str: ...
    @property
    def entries(self) -> int: ...
    @property
    def frequent(self) -> int: ...
    @property
    def partition(self) -> int: ...
    def lookup(self, queries: NDArray[np.uint64], out: NDArray[np.uint8], cap: int) -> None:
        """out[i] = min(cap, out[i] + stored count of queries[i]) for ascending uint64 queries."""

class NgramStream:
    """Counts of fixed query hashes (strictly increasing uint64) in documents streamed past them, behind a Bloom
    prefilter; counts saturate at threshold + 1, with dedup once per document; records up to max_ids documents
    per query."""

    def __init__(self, queries: NDArray[np.uint64], n: int, threshold: int, dedup: bool, max_ids: int) -> None: ...
    def process(
        self, tokens: NDArray[np.uint16] | NDArray[np.uint32], doc_offsets: NDArray[np.int64], seed: int
    ) -> NDArray[np.int64]:
        """Streams whole documents (uint16 or uint32 tokens)."""
    @property
    def counts(self) -> NDArray[np.uint8]: ...

def caption_rouge_l(
    tokens: NDArray[np.uint32], caption_starts: NDArray[np.int64], image_starts: NDArray[np.int64], beta: float = 1.2
) -> NDArray[np.float64]:
    """ROUGE-L of each image as pycocoevalcap 1.2 (same buffers as CaptionNgrams)."""

def greedy_k_center(
    features: NDArray[np.float16] | NDArray[np.float32],
    k: int,
    first: int,
    float16: bool = True,
    threads: int = 0,
    simd: bool = True,
    on_pick: Callable[[int], object] | None = None,
) -> NDArray[np.int64]:
    """Greedy k-center over the rows of features (C-contiguous float16 or float32, n x d) from row `first`: each
    next center is the row farthest (Euclidean) from its nearest center, ties to the lowest index."""

def kcenter_simd_path() -> str:
    """The row-distance code greedy_k_center uses on this CPU: 'avx2+f16c+fma' or 'portable'."""

def levenshtein_distance(a: Sequence[str], b: Sequence[str]) -> NDArray[np.int64]:
    """Levenshtein distance, in code points, between a[i] and b[i] for every i (two equally long sequences of
    str)."""

def levenshtein_similarity(a: Sequence[str], b: Sequence[str]) -> NDArray[np.float64]:
    """1 - levenshtein_distance / max(len(a[i]), len(b[i])) for every i (1.0 for two empty strings)."""

def merge_segments(
    inputs: Sequence[str],
    out: str | None,
    n: int,
    threshold: int,
    partition_bits: int,
    partition: int,
    dedup: bool,
) -> tuple[int, int]:
    """K-way merge of segment files of one partition (checked against n, threshold, partition and dedup,
    checksums verified as read), summing counts saturated at threshold + 1, into the segment file out (None:
    count only; nothing is left there if the merge fails or, on the main thread, Ctrl-C stops it)."""

def ngram_hashes(
    tokens: NDArray[np.uint32], doc_offsets: NDArray[np.int64], n: int = 8, seed: int = 0
) -> NDArray[np.uint64]:
    """XXH3-64 (with seed) of the little-endian bytes of every window of n consecutive uint32 tokens that lies
    inside one document; documents start at doc_offsets (the last ends at len(tokens))."""

def sort_counts(keys: NDArray[np.uint64], bits: int, cap: int) -> tuple[NDArray[np.uint64], NDArray[np.uint8]]:
    """The distinct keys in ascending order and how often each occurs, saturated at cap: the map's sort and count
    of one partition, whose keys agree above their low `bits`."""

def to_float16(values: NDArray[np.float32], threads: int = 0, simd: bool = True) -> NDArray[np.float16]:
    """float32 values as float16, rounded to nearest even (as numpy's astype(float16)); the conversion
    greedy_k_center applies with float16=True."""

def word_ids(
    texts: Sequence[str], table: NDArray[np.uint32], seed: int
) -> tuple[NDArray[np.uint32], NDArray[np.int64]]:
    """The `words` tokenizer: every text (a sequence of str) cut into maximal runs of word characters, each word
    mapped to XXH32 (with seed) of the UTF-8 bytes of its lower case as str.lower() gives it."""
