"""The image-token cache of an index: a record shard's image tokens kept while it is indexed, and read back by
a scan instead of decoding the images again, only while they still describe the shard and its images."""

from __future__ import annotations

import io
import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from fastmmeval.contam.ngram.hashing import IMAGE_SEED, TEXT_SEED
from fastmmeval.contam.ngram.image_cache import ImageTokenCache, usage
from fastmmeval.contam.ngram.index import NgramIndex
from fastmmeval.contam.ngram.settings import IndexSettings, TokenBlock
from fastmmeval.contam.readers.image_tokens import ImageTokenizerBase
from fastmmeval.contam.readers.shards import RecordSource
from fastmmeval.contam.readers.text_tokens import WordTokenizer


class MeanColourTokenizer(ImageTokenizerBase):
    """Stands in for an image tokenizer: 32 tokens from the image's mean colour; counts the images it prepares."""

    name = "mean"
    fingerprint = "mean-v0"

    def __init__(self) -> None:
        self.prepared = 0

    def prepare(self, image: Image.Image) -> np.ndarray:
        self.prepared += 1
        return np.asarray(image)

    def encode_prepared(self, prepared: list[np.ndarray]) -> np.ndarray:
        return np.array([[int(p.mean()) + k for k in range(32)] for p in prepared], dtype=np.uint32)


class OtherTokenizer(MeanColourTokenizer):
    fingerprint = "other-v0"


def _shard(root: Path, n: int = 30) -> Path:
    """A LLaVA shard of n records, each with a question and an image of its own grey level (every seventh
    record's image is missing, and record 5 has two images)."""
    (root / "img").mkdir(parents=True, exist_ok=True)
    records = []
    for r in range(n):
        if r % 7 != 3:
            Image.new("RGB", (8, 8), (r, r, r)).save(root / "img" / f"{r}.png")
        image: str | list[str] = [f"{r}.png", "0.png"] if r == 5 else f"{r}.png"
        turns = [{"from": "human", "value": f"<image>\nWhat grey is picture {r}?"}, {"from": "gpt", "value": "Grey."}]
        records.append({"id": f"rec-{r}", "image": image, "conversations": turns})
    path = root / "train.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def _source(shard: Path, cache: Path | None, write: bool = False) -> RecordSource:
    image_cache = None if cache is None else ImageTokenCache(cache, write)
    return RecordSource(
        shard, "llava", WordTokenizer(), MeanColourTokenizer(), shard.parent / "img", block_tokens=40, image_batch=4,
        image_cache=image_cache,
    )  # fmt: skip


def _by_modality(blocks: list[TokenBlock]) -> dict[int, tuple[list[int], list[str]]]:
    """Each modality's tokens and document ids, concatenated in corpus order."""
    out = {}
    for seed in (TEXT_SEED, IMAGE_SEED):
        chosen = [b for b in blocks if b.seed == seed]
        out[seed] = ([t for b in chosen for t in b.tokens.tolist()], [i for b in chosen for i in b.ids])
    return out


def test_a_scan_reads_back_the_tokens_the_build_kept(tmp_path: Path) -> None:
    shard, cache = _shard(tmp_path), tmp_path / "cache"
    plain = _source(shard, None)
    expected = _by_modality(list(plain.blocks()))
    assert plain.cache_state() is None and plain.missing_images() == 4

    writer = _source(shard, cache, write=True)
    assert _by_modality(list(writer.blocks())) == expected
    assert writer.cache_state() == "written" and usage(cache)["entries"] == 1

    # Read back: the same documents of both modalities, the same missing count, and not one image decoded.
    reader = _source(shard, cache)
    blocks = list(reader.blocks())
    assert _by_modality(blocks) == expected
    assert reader.cache_state() == "read" and reader.missing_images() == 4
    assert reader.image_tokenizer.prepared == 0
    assert all(b.doc_offsets.tolist() == list(range(0, len(b.tokens), 32)) for b in blocks if b.seed == IMAGE_SEED)


def test_changed_images_or_shard_are_decoded_again(tmp_path: Path) -> None:
    shard, cache = _shard(tmp_path), tmp_path / "cache"
    list(_source(shard, cache, write=True).blocks())

    # An image rewritten in place (same name, other pixels): its tokens come from the file as it is now.
    Image.new("RGB", (8, 8), (250, 250, 250)).save(tmp_path / "img" / "4.png")
    os.utime(tmp_path / "img" / "4.png", ns=(1, 1))
    reader = _source(shard, cache)
    got = _by_modality(list(reader.blocks()))
    assert reader.cache_state() == "stale" and reader.image_tokenizer.prepared == 27
    assert got == _by_modality(list(_source(shard, None).blocks()))
    assert got[IMAGE_SEED][0][32 * 3] == 250  # record 4's image comes after those of records 0-2 (3's is missing)
    # A missing image that turned up, and a shard that changed, make the entry stale too.
    list(_source(shard, cache, write=True).blocks())
    Image.new("RGB", (8, 8), (9, 9, 9)).save(tmp_path / "img" / "3.png")
    reader = _source(shard, cache)
    list(reader.blocks())
    assert reader.cache_state() == "stale" and reader.missing_images() == 3
    list(_source(shard, cache, write=True).blocks())
    shard.write_text(shard.read_text().replace("Grey.", "Gray."), encoding="utf-8")
    reader = _source(shard, cache)
    list(reader.blocks())
    assert reader.cache_state() == "stale"
    # Another image tokenizer, or another image root, has no entry.
    for other in (
        replace(_source(shard, cache), image_tokenizer=OtherTokenizer()),
        replace(_source(shard, cache), image_root=tmp_path),
    ):
        list(other.blocks())
        assert other.cache_state() == "absent"


def test_a_damaged_entry_is_not_read(tmp_path: Path) -> None:
    shard, cache = _shard(tmp_path), tmp_path / "cache"
    list(_source(shard, cache, write=True).blocks())
    [entry] = cache.iterdir()
    offsets = entry / "tokens.u32.offsets"
    offsets.write_bytes(offsets.read_bytes()[:-8])
    reader = _source(shard, cache)
    assert _by_modality(list(reader.blocks())) == _by_modality(list(_source(shard, None).blocks()))
    assert reader.cache_state() == "absent" and reader.image_tokenizer.prepared == 27


def test_a_build_stopped_midway_leaves_no_entry(tmp_path: Path) -> None:
    shard, cache = _shard(tmp_path), tmp_path / "cache"
    blocks = _source(shard, cache, write=True).blocks()
    next(blocks), next(blocks)
    blocks.close()
    assert list(cache.iterdir()) == []
    reader = _source(shard, cache)
    list(reader.blocks())
    assert reader.cache_state() == "absent"


def test_index_keeps_image_tokens_unless_told_not_to(tmp_path: Path) -> None:
    shard = _shard(tmp_path)
    kept = NgramIndex.create(tmp_path / "kept", IndexSettings(), {})
    kept.add([_source(shard, None)], progress=False)
    assert kept.stats()["image_cache"]["entries"] == 1
    assert kept.stats()["image_cache"]["bytes"] > 26 * 32 * 4
    bare = NgramIndex.create(tmp_path / "bare", IndexSettings(), {})
    bare.add([_source(shard, None)], progress=False, keep_image_tokens=False)
    assert bare.stats()["image_cache"] == {"entries": 0, "bytes": 0}
    # What a killed add left half written is swept by the next one.
    leftover = kept.image_cache().folder / "train.json-0123.tmp-999"
    leftover.mkdir()
    kept.add([replace(_source(shard, None), name="again")], progress=False)
    assert not leftover.exists() and kept.stats()["image_cache"]["entries"] == 1


@pytest.mark.parametrize("write", [True, False])
def test_sources_without_an_image_tokenizer_ignore_the_cache(tmp_path: Path, write: bool) -> None:
    shard, cache = _shard(tmp_path), tmp_path / "cache"
    source = replace(_source(shard, cache, write), image_tokenizer=None)
    assert {b.seed for b in source.blocks()} == {TEXT_SEED}
    assert source.cache_state() is None and not cache.exists()


def test_embedded_images_are_kept_and_read_back(tmp_path: Path) -> None:
    # A parquet shard holding its images' bytes: the shard's own state stands for theirs.
    rows = []
    for r in range(9):
        png = io.BytesIO()
        Image.new("RGB", (8, 8), (20 * r, 0, 0)).save(png, format="PNG")
        rows.append({"id": f"p{r}", "text": f"Row {r} says hello.", "image": {"bytes": png.getvalue(), "path": None}})
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")

    def source(write: bool) -> RecordSource:
        return RecordSource(
            tmp_path / "train.parquet", "parquet", WordTokenizer(), MeanColourTokenizer(), image_batch=2,
            image_cache=ImageTokenCache(tmp_path / "cache", write),
        )  # fmt: skip

    written = _by_modality(list(source(write=True).blocks()))
    reader = source(write=False)
    assert _by_modality(list(reader.blocks())) == written
    assert reader.cache_state() == "read" and reader.image_tokenizer.prepared == 0
    assert written[IMAGE_SEED][1] == [f"p{r}" for r in range(9)]
