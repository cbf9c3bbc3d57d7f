"""Contamination audits: the n-gram overlap of benchmark tasks with a training corpus.

Three layers, each importing only those below it: `contam.ngram` (the n-gram index: building, opening and
counting, and streaming counts without one), `contam.readers` (corpus shards and the tokenizers), and
`contam.audit` (scanning tasks against an index or a streamed corpus, and the report). Their APIs are
exported here: `NgramIndex.create` / `open`, `open_sources`, `choose_tokenizers` / `index_tokenizers`,
`audit_tasks`, `write_audit`, `summary_table` and the rest of `__all__`.
"""

from fastmmeval.util import lazy_exports

_LAYERS = {
    "ngram": (
        "CorpusError", "IndexSettings", "NgramIndex", "NgramIndexError", "RayEngineError", "ShardSource",
        "TokenBlock", "TokenShardSource", "stream_counts", "write_token_shard",
    ),
    "readers": (
        "IMAGE_BATCH", "RecordSource", "Tokenizers", "choose_tokenizers", "index_tokenizers", "make_image_tokenizer",
        "make_text_tokenizer", "open_sources",
    ),
    "audit": ("ScanOptions", "audit_tasks", "summary_lines", "summary_table", "write_audit", "write_report"),
}  # fmt: skip
__all__ = sorted(name for names in _LAYERS.values() for name in names)
# Every `fastmmeval` command imports `contam.cli`, and with it this package: importing the layers here (numpy,
# PIL, datasketch, the tasks) would slow the start of every command, so each name is imported on first use.
__getattr__ = lazy_exports(__name__, {name: layer for layer, names in _LAYERS.items() for name in names})
