"""Training-corpus shards as `ShardSource`s: LLaVA instruction JSON, JSONL, parquet, and pre-tokenized files.

What counts as training text: every conversation turn, the human's and the model's alike (a benchmark
question copied into a prompt and a benchmark answer or caption copied into a reply are both leaks). Each
turn is its own text document (the `<image>` placeholder removed) and each image its own image document,
all carrying the record's id, so no n-gram window spans two turns, two images, or text and image.

Sources read lazily and yield bounded blocks (about `block_tokens` tokens, or `image_batch` images), so a
shard of any size streams through in constant memory. Images that are referenced but missing, unreadable,
over the pixel cap (`max_pixels`) or outside the image root are counted (`missing_images()`) and the first
`NAMED_MISSING` of them named (`missing_image_refs()`), never fatal. Every image is opened through
`fastmmeval.images.open_image`, and a relative path must stay inside the image root (an absolute one is
refused unless `allow_absolute_paths`).
"""

from __future__ import annotations

import glob
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from fastmmeval.contam.ngram.hashing import IMAGE_SEED, TEXT_SEED
from fastmmeval.contam.ngram.image_cache import (
    EntryWriter,
    ImageTokenCache,
    RefStates,
    entry_path,
    file_state,
    read_entry,
)
from fastmmeval.contam.ngram.settings import BLOCK_TOKENS, CorpusError, ShardSource, TokenBlock, concat_docs
from fastmmeval.contam.ngram.shard_identity import file_identity
from fastmmeval.contam.ngram.token_shards import TokenShardSource
from fastmmeval.contam.readers.image_refs import ImageReading, MissingImages
from fastmmeval.contam.readers.records import Record, iter_json_array, iter_parquet_rows, llava_record, row_record
from fastmmeval.images import DEFAULT_MAX_PIXELS, ImageRefused
from fastmmeval.util import available_cores, iter_jsonl

FORMATS = ("llava", "jsonl", "parquet", "tokens")
IMAGE_BATCH = 64


@dataclass
class RecordSource:
    """A shard of records (LLaVA JSON, JSONL or parquet) tokenized on the fly into text and image blocks.

    `text_fields` / `image_field` / `id_field` name the columns of JSONL and parquet rows (a text column may
    hold a string or a list of strings; the image column a path, a list of paths, bytes, or a Hugging Face
    `{'bytes', 'path'}` dict; a text column of `{'from', 'value'}` turns counts each turn). `image_tokenizer=None`
    skips images (text-only audits)."""

    path: Path
    format: str
    text_tokenizer: Any
    image_tokenizer: Any = None
    image_root: Path | None = None
    text_fields: tuple[str, ...] = ("text",)
    image_field: str | None = "image"
    id_field: str | None = "id"
    block_tokens: int = BLOCK_TOKENS
    image_batch: int = IMAGE_BATCH
    decode_threads: int = 0  # threads decoding and preparing images (0: the cores this process may use)
    name: str = ""
    image_cache: ImageTokenCache | None = None  # where the image tokens are kept or looked up (image_cache.py)
    max_pixels: int | None = DEFAULT_MAX_PIXELS  # a larger image counts as unreadable (None: no cap)
    allow_absolute_paths: bool = False  # absolute image paths are refused unless this is set
    _missing: MissingImages = field(default_factory=MissingImages, init=False, repr=False)
    _cache_state: str | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if self.format not in ("llava", "jsonl", "parquet"):
            raise CorpusError(f"{self.path}: unknown record format {self.format!r}")
        if self.image_batch < 1 or self.decode_threads < 0:
            raise CorpusError(
                f"{self.path}: --image_batch must be at least 1 and --decode_threads at least 0 (0: every core), "
                f"not {self.image_batch} and {self.decode_threads}"
            )
        if self.max_pixels is not None and self.max_pixels < 1:
            raise CorpusError(f"{self.path}: --max_image_pixels must be positive, not {self.max_pixels}")
        self.name = self.name or str(self.path)

    def missing_images(self) -> int:
        """Images referenced but missing, unreadable or refused, counted by the last blocks() run in this process."""
        return self._missing.count

    def missing_image_refs(self) -> list[str]:
        """The first NAMED_MISSING of those images as 'record <id>: <reference> (<why>)', in corpus order."""
        return list(self._missing.named)

    def identity(self) -> dict[str, Any]:
        """What decides this shard's tokens: its file (resolved path, size, modification time), the columns read
        (JSONL and parquet), the tokenizers, and which images are read (root, pixel cap, absolute paths)."""
        images = self.image_tokenizer is not None
        columns = [*self.text_fields, *([self.image_field] if images else [])] if self.format != "llava" else None
        reading = self._reading
        return {
            "format": self.format, "files": [file_identity(self.path)], "columns": columns,
            "text_tokenizer": self.text_tokenizer.fingerprint,
            "image_tokenizer": self.image_tokenizer.fingerprint if images else None,
            **({"image_root": str(reading.root.resolve()), "max_pixels": reading.max_pixels,
                "allow_absolute_paths": reading.allow_absolute} if images else {}),
        }  # fmt: skip

    def with_image_cache(self, cache: ImageTokenCache) -> RecordSource:
        """This source keeping (or looking up) its image tokens in `cache` if it reads images; else itself."""
        return self if self.image_tokenizer is None else replace(self, image_cache=cache)

    def cache_state(self) -> str | None:
        """What the last blocks() run did with the image cache: 'written', 'read', 'stale' (an entry no longer
        describes the shard's images, so they were decoded), 'absent', or None (no cache, or no images read)."""
        return self._cache_state

    def records(self) -> Iterator[Record]:
        """The shard's records, read lazily."""
        if self.format == "llava":
            for i, obj in enumerate(iter_json_array(self.path)):
                yield llava_record(obj, self.path, i)
        elif self.format == "jsonl":
            for i, (lineno, row) in enumerate(iter_jsonl(self.path, CorpusError)):
                yield self._row_record(row, f"{self.path}:{lineno}", i)
        else:
            columns = [c for c in (*self.text_fields, self.image_field, self.id_field) if c]
            for i, row in enumerate(iter_parquet_rows(self.path, columns)):
                yield self._row_record(row, f"{self.path}: row {i}", i)

    def images_of(self, ids: set[str]) -> dict[str, list[Image.Image]]:
        """The readable images of the records with these training ids (the first record of each id), found by
        reading the records again; parquet shards read their id column first and then only the row groups
        holding those ids."""
        found: dict[str, list[Image.Image]] = {}
        reading = self._reading
        for record in self._records_with(ids):
            if record.id in ids and record.id not in found:
                found[record.id] = [im for im in map(reading.readable, record.images) if im is not None]
                if len(found) == len(ids):
                    break
        return found

    def _records_with(self, ids: set[str]) -> Iterator[Record]:
        """Records, among them every record with one of these ids (for parquet, only the row groups holding them)."""
        if self.format != "parquet" or not self.id_field:
            yield from self.records()
            return
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(self.path)
        columns = [c for c in (*self.text_fields, self.image_field, self.id_field) if c]
        start = 0
        for group in range(pf.num_row_groups):
            rows = pf.metadata.row_group(group).num_rows
            group_ids = pf.read_row_group(group, columns=[self.id_field]).column(0).to_pylist()
            if any(str(i) in ids for i in group_ids if i is not None):
                table = pf.read_row_group(group, columns=columns)
                for k, row in enumerate(table.to_pylist()):
                    yield self._row_record(row, f"{self.path}: row {start + k}", start + k)
            start += rows

    def _row_record(self, row: Any, where: str, index: int) -> Record:
        return row_record(row, where, f"{self.path.name}#{index}", self.text_fields, self.image_field, self.id_field)

    @property
    def _reading(self) -> ImageReading:
        root = Path(self.image_root) if self.image_root is not None else self.path.parent
        return ImageReading(root, self.allow_absolute_paths, self.max_pixels)

    def _prepare_image(self, reading: ImageReading, ref: Any) -> np.ndarray | str:
        """The image tokenizer's input for one image reference, or why the image cannot be read."""
        try:
            return self.image_tokenizer.prepare(reading.open(ref))
        except ImageRefused as e:
            return str(e)

    def _cache_describe(self) -> dict[str, Any]:
        """What an image-cache entry of this shard must match: the file, its state, the reading, the tokenizer."""
        root = None if self.image_root is None else str(Path(self.image_root).resolve())
        describe = {
            "shard": str(self.path.resolve()),
            "shard_state": file_state(self.path),
            "format": self.format,
            "image_root": root,
            "image_field": self.image_field,
            "id_field": self.id_field,
            "tokenizer": self.image_tokenizer.fingerprint,
        }
        # Which images are read at all; named only when not the default, so the entries of a default reading
        # keep the names and contents they had before these settings existed.
        if self.max_pixels != DEFAULT_MAX_PIXELS:
            describe["max_pixels"] = self.max_pixels
        if self.allow_absolute_paths:
            describe["allow_absolute_paths"] = True
        return describe

    def blocks(self) -> Iterator[TokenBlock]:
        """Text blocks (TEXT_SEED) and image blocks (IMAGE_SEED), each holding whole documents. With an image
        cache to read, a shard whose entry still describes it yields its text blocks, then its image
        blocks from the entry; with one to write, the entry is written as the images are tokenized."""
        self._missing = MissingImages()
        self._cache_state = None
        cache = self.image_cache if self.image_tokenizer is not None else None
        if cache is None:
            yield from self._blocks(with_text=True, with_images=self.image_tokenizer is not None)
            return
        describe = self._cache_describe()
        refs = RefStates()
        if cache.write:
            with EntryWriter(entry_path(cache, describe), describe) as writer:
                yield from self._blocks(with_text=True, with_images=True, states=refs, on_tokens=writer.add)
                writer.commit(refs.hexdigest(), self._missing.count)
            self._cache_state = "written"
            return
        entry = read_entry(cache, describe)
        if entry is None or entry.meta["shard_state"] != describe["shard_state"]:
            self._cache_state = "absent" if entry is None else "stale"
            yield from self._blocks(with_text=True, with_images=True)
            return
        yield from self._blocks(with_text=True, with_images=False, states=refs)
        if refs.hexdigest() == entry.refs:
            self._cache_state = "read"
            self._missing = MissingImages(entry.missing)
            yield from entry.blocks(self.block_tokens)
        else:
            self._cache_state = "stale"
            yield from self._blocks(with_text=False, with_images=True)

    def _blocks(
        self,
        with_text: bool,
        with_images: bool,
        states: RefStates | None = None,
        on_tokens: Callable[[np.ndarray, list[str]], None] | None = None,
    ) -> Iterator[TokenBlock]:
        """blocks() without the cache: the text and/or the image blocks; the state of each image reference is
        added to `states`, and each batch of image tokens passed to `on_tokens` in corpus order, when given."""
        reading = self._reading
        texts: list[str] = []
        text_ids: list[str] = []
        chars = 0
        refs: list[Any] = []
        image_ids: list[str] = []
        # Decoding images dominates an image corpus: PIL releases the GIL, so a batch is decoded and prepared
        # on the pool, and so is a text block tokenized (the `words` split releases the GIL too). Blocks wait
        # in `ahead` in corpus order; the oldest is finished here (an image batch's batched tokenizer step:
        # the DCT, or SEED's model) only once the next one is under way, while the records after it are read.
        ahead: deque[Callable[[], TokenBlock | None]] = deque()

        def finished(depth: int) -> Iterator[TokenBlock]:
            while len(ahead) > depth:
                block = ahead.popleft()()
                if block is not None:
                    yield block

        with ThreadPoolExecutor(self.decode_threads or available_cores()) as pool:
            for record in self.records():
                if with_text:
                    for text in record.texts:
                        texts.append(text)
                        text_ids.append(record.id)
                        chars += len(text)
                if states is not None:
                    for ref in record.images:
                        reading.add_state(states, ref)
                if with_images:
                    refs.extend(record.images)
                    image_ids.extend([record.id] * len(record.images))
                # ~5 characters per word token: a block stays near block_tokens without tokenizing twice.
                if chars >= 5 * self.block_tokens:
                    ahead.append(pool.submit(self._text_block, texts, text_ids).result)
                    texts, text_ids, chars = [], [], 0
                    yield from finished(1)
                if len(refs) >= self.image_batch:
                    ahead.append(self._image_batch(pool, refs, image_ids, on_tokens))
                    refs, image_ids = [], []
                    yield from finished(1)
            if texts:
                ahead.append(pool.submit(self._text_block, texts, text_ids).result)
            if refs:
                ahead.append(self._image_batch(pool, refs, image_ids, on_tokens))
            yield from finished(0)

    def _text_block(self, texts: list[str], ids: list[str]) -> TokenBlock:
        tokens, offsets = self.text_tokenizer.encode_concat(texts)
        return TokenBlock(tokens, offsets, TEXT_SEED, ids)

    def _image_batch(
        self,
        pool: ThreadPoolExecutor,
        refs: list[Any],
        ids: list[str],
        on_tokens: Callable[[np.ndarray, list[str]], None] | None,
    ) -> Callable[[], TokenBlock | None]:
        """Starts decoding and preparing `refs` on the pool; returns what finishes them: the readable images as
        one tokenized block (None when no image is readable; their tokens and ids passed to `on_tokens` too),
        the unreadable ones counted."""
        reading = self._reading
        prepared = [pool.submit(self._prepare_image, reading, ref) for ref in refs]

        def finish() -> TokenBlock | None:
            kept = []
            for future, ref, i in zip(prepared, refs, ids, strict=True):
                image = future.result()
                if isinstance(image, str):
                    self._missing.add(ref, i, image)
                else:
                    kept.append((image, i))
            if not kept:
                return None
            tokens = np.asarray(self.image_tokenizer.encode_prepared([image for image, _ in kept]), dtype=np.uint32)
            kept_ids = [i for _, i in kept]
            if on_tokens is not None:
                on_tokens(tokens, kept_ids)
            return concat_docs(list(tokens), kept_ids, IMAGE_SEED)

        return finish


def without_images(source: ShardSource) -> ShardSource | None:
    """The source with its images left out: a record source reads only its text, a shard of image tokens is
    dropped (None), any other source stays as it is."""
    if isinstance(source, RecordSource):
        return replace(source, image_tokenizer=None)
    if isinstance(source, TokenShardSource) and source.modality == "image":
        return None
    return source


def guess_format(path: Path) -> str:
    """The shard format from the file name: .json -> llava, .jsonl -> jsonl, .parquet, .u16/.u32 -> tokens."""
    suffix = Path(path).suffix.lower()
    by_suffix = {".json": "llava", ".jsonl": "jsonl", ".parquet": "parquet", ".u16": "tokens", ".u32": "tokens"}
    if suffix not in by_suffix:
        raise CorpusError(f"{path}: cannot tell the shard format from the name; pass --format {'|'.join(FORMATS)}")
    return by_suffix[suffix]


def expand_paths(specs: Sequence[str]) -> list[Path]:
    """Shard paths from paths and globs (each glob sorted), each file once; an unmatched spec is an error."""
    out: list[Path] = []
    for spec in specs:
        matches = sorted(glob.glob(spec, recursive=True)) if glob.has_magic(spec) else [spec]
        files = [Path(m) for m in matches if Path(m).is_file()]
        if not files:
            raise CorpusError(f"corpus shard {spec!r}: no such file")
        out.extend(f for f in files if f not in out)
    return out


def open_sources(
    specs: Sequence[str],
    format: str = "auto",
    text_tokenizer: Any = None,
    image_tokenizer: Any = None,
    image_root: Path | None = None,
    text_fields: Sequence[str] = ("text",),
    image_field: str | None = "image",
    id_field: str | None = "id",
    modality: str = "text",
    block_tokens: int = BLOCK_TOKENS,
    image_batch: int = IMAGE_BATCH,
    decode_threads: int = 0,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    allow_absolute_paths: bool = False,
) -> list[RecordSource | TokenShardSource]:
    """One source per shard file matched by `specs` (paths or globs); `format` 'auto' guesses from names;
    record shards open their images with the pixel cap `max_pixels`, absolute image paths only when allowed."""
    sources: list[RecordSource | TokenShardSource] = []
    for path in expand_paths(specs):
        fmt = guess_format(path) if format == "auto" else format
        if fmt == "tokens":
            sources.append(TokenShardSource(path, modality, block_tokens))
        elif fmt in FORMATS:
            if text_tokenizer is None:
                raise CorpusError(f"{path}: a {fmt} shard needs a text tokenizer")
            root = Path(image_root) if image_root is not None else path.parent
            sources.append(
                RecordSource(
                    path, fmt, text_tokenizer, image_tokenizer, root, tuple(text_fields), image_field, id_field,
                    block_tokens, image_batch, decode_threads, max_pixels=max_pixels,
                    allow_absolute_paths=allow_absolute_paths,
                )
            )
        else:
            raise CorpusError(f"--format {fmt!r}: expected auto or one of {', '.join(FORMATS)}")
    return sources
