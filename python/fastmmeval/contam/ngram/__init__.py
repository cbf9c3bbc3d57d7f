"""The n-gram index: hashed n-gram windows, what a count reads (token blocks of shard sources, pre-tokenized
token shards) and how it counts (`IndexSettings`), the segment files, the build (local or on Ray), the
index with the image-token cache kept beside it, and streaming counts without an index."""

from fastmmeval.contam.ngram.hashing import IMAGE_SEED, TEXT_SEED, ngram_hashes
from fastmmeval.contam.ngram.image_cache import ImageTokenCache
from fastmmeval.contam.ngram.index import NgramIndex
from fastmmeval.contam.ngram.ray_engine import RayEngineError
from fastmmeval.contam.ngram.segment import NgramIndexError
from fastmmeval.contam.ngram.settings import CorpusError, IndexSettings, ShardSource, TokenBlock
from fastmmeval.contam.ngram.stream import stream_counts
from fastmmeval.contam.ngram.token_shards import TokenShardSource, write_token_shard

__all__ = [
    "IMAGE_SEED", "TEXT_SEED", "CorpusError", "ImageTokenCache", "IndexSettings", "NgramIndex", "NgramIndexError",
    "RayEngineError", "ShardSource", "TokenBlock", "TokenShardSource", "ngram_hashes", "stream_counts",
    "write_token_shard",
]  # fmt: skip
