"""Readers of training corpora and the tokenizers they (and benchmarks) are read with: record shards (LLaVA
JSON, JSONL, parquet) and token shards as shard sources, text and image tokenizers, and the tokenizer choice
of an index or an audit."""

from fastmmeval.contam.readers.image_tokens import OfflineImageTokenizer, SeedImageTokenizer, make_image_tokenizer
from fastmmeval.contam.readers.shards import IMAGE_BATCH, RecordSource, open_sources
from fastmmeval.contam.readers.text_tokens import HFTextTokenizer, WordTokenizer, make_text_tokenizer
from fastmmeval.contam.readers.tokenizers import Tokenizers, choose_tokenizers, index_tokenizers

__all__ = [
    "IMAGE_BATCH", "HFTextTokenizer", "OfflineImageTokenizer", "RecordSource", "SeedImageTokenizer", "Tokenizers",
    "WordTokenizer", "choose_tokenizers", "index_tokenizers", "make_image_tokenizer", "make_text_tokenizer",
    "open_sources",
]  # fmt: skip
