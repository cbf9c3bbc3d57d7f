"""Training records as the corpus readers see them: one example's id, text documents and image references;
the reader of LLaVA instruction JSON (a top-level array, parsed one record at a time), and the records of
JSONL and parquet rows."""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastmmeval.contam.ngram.settings import CorpusError

_JSON_CHUNK = 1 << 20


@dataclass
class Record:
    """One training example: its id, its text documents and its image references."""

    id: str
    texts: list[str]
    images: list[Any]  # paths (relative to the image root), bytes, {'bytes', 'path'} dicts or PIL images


def one_line(error: BaseException) -> str:
    """An error's message on one line (pyarrow's and PIL's may span several)."""
    return " ".join(str(error).split())


def training_id(value: Any) -> str:
    """A record's id as text that can be written anywhere: a lone surrogate (JSON may escape one, `"\\ud800"`)
    becomes its escape, as no UTF-8 file or terminal can hold it."""
    text = str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def strip_placeholders(text: str) -> str:
    """The text with the `<image>` placeholder (where LLaVA prompts put the image) removed."""
    return text.replace("<image>", " ")


def iter_json_array(path: Path) -> Iterator[Any]:
    """The elements of a top-level JSON array, parsed one at a time (memory bounded by the largest element)."""
    try:
        yield from _json_array(path)
    except UnicodeDecodeError:
        line, byte = utf8_error_at(path)
        raise CorpusError(f"{path}:{line}: not UTF-8 text (byte {byte:,} of the file)") from None


def utf8_error_at(path: Path) -> tuple[int, int]:
    """(line, byte), both counted from 1, of the first byte of a file that is not UTF-8; (0, 0) if none is."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    line, offset = 1, 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(_JSON_CHUNK)
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as e:
                # e.object is the decoder's held-back bytes (a sequence cut by the previous chunk) + this chunk.
                at = e.start - (len(e.object) - len(chunk))
                return line + chunk[: max(at, 0)].count(b"\n"), offset + at + 1
            if not chunk:
                return 0, 0
            line += chunk.count(b"\n")
            offset += len(chunk)


def _json_array(path: Path) -> Iterator[Any]:
    decoder = json.JSONDecoder()
    with open(path, encoding="utf-8") as f:
        buf, pos, eof = "", 0, False

        def fill() -> bool:
            nonlocal buf, pos
            chunk = f.read(_JSON_CHUNK)
            buf, pos = buf[pos:] + chunk, 0
            return bool(chunk)

        def skip(chars: str) -> None:
            nonlocal pos, eof
            while True:
                while pos < len(buf) and buf[pos] in chars:
                    pos += 1
                if pos < len(buf) or eof:
                    return
                eof = not fill()

        skip(" \t\r\n")
        if pos >= len(buf) or buf[pos] != "[":
            raise CorpusError(f"{path}: expected a JSON array of records (LLaVA format)")
        pos += 1
        index = 0
        while True:
            skip(" \t\r\n,")
            if pos >= len(buf):
                raise CorpusError(f"{path}: truncated JSON array after {index} records")
            if buf[pos] == "]":
                return
            while True:
                try:
                    obj, end = decoder.raw_decode(buf, pos)
                    break
                except json.JSONDecodeError as e:
                    if eof:
                        raise CorpusError(f"{path}: record {index}: invalid JSON ({e.msg})") from None
                    eof = not fill()
                except RecursionError:
                    raise CorpusError(f"{path}: record {index}: JSON nested too deeply") from None
                except ValueError as e:  # an integer literal too long to convert
                    raise CorpusError(f"{path}: record {index}: invalid JSON ({e})") from None
            pos = end
            index += 1
            yield obj


def llava_record(obj: Any, path: Path, index: int) -> Record:
    """Record `index` of a LLaVA JSON shard: every conversation turn a text document, `image` its image(s)."""
    where = f"{path}: record {index}"
    if not isinstance(obj, dict):
        raise CorpusError(f"{where}: expected an object, got {type(obj).__name__}")
    turns = obj.get("conversations")
    if not isinstance(turns, list):
        raise CorpusError(f"{where}: field 'conversations' must be a list of {{'from', 'value'}} turns")
    texts = []
    for t, turn in enumerate(turns):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise CorpusError(f"{where}: conversations[{t}] has no string 'value'")
        texts.append(strip_placeholders(turn["value"]))
    image = obj.get("image")
    images = [] if image is None else list(image) if isinstance(image, list) else [image]
    return Record(training_id(obj.get("id", f"{path.name}#{index}")), texts, images)


def row_record(
    row: Any, where: str, default_id: str, text_fields: Sequence[str], image_field: str | None, id_field: str | None
) -> Record:
    """The record of one JSONL or parquet row (`where` names it in errors): each text column a string, a list
    of strings or of {'from', 'value'} turns; the image column one reference or a list of them."""
    if not isinstance(row, dict):
        raise CorpusError(f"{where}: expected an object, got {type(row).__name__}")
    texts: list[str] = []
    for name in text_fields:
        value = row.get(name)
        if value is None:
            continue
        values = value if isinstance(value, list) else [value]
        # Conversation turns ({'from', 'value'} dicts, as in LLaVA data stored as parquet) count by value.
        values = [v.get("value") if isinstance(v, dict) else v for v in values]
        if not all(isinstance(v, str) for v in values):
            raise CorpusError(f"{where}: field {name!r} must hold strings or {{'from', 'value'}} turns")
        texts.extend(strip_placeholders(v) for v in values)
    image = row.get(image_field) if image_field else None
    images = [] if image is None else list(image) if isinstance(image, list) else [image]
    rid = row.get(id_field) if id_field else None
    return Record(training_id(rid) if rid is not None else default_id, texts, images)


def iter_parquet_rows(path: Path, columns: list[str]) -> Iterator[dict[str, Any]]:
    """The rows of a parquet file (those columns only), read a batch at a time; CorpusError naming the file
    (and the first row of a batch that cannot be read)."""
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises several unrelated types for a bad file
        raise CorpusError(f"{path}: not a readable parquet file ({one_line(e)})") from None
    missing = [c for c in columns if c not in pf.schema_arrow.names]
    if missing:
        raise CorpusError(f"{path}: no column(s) {missing} (has {pf.schema_arrow.names})")
    batches, row = pf.iter_batches(batch_size=1024, columns=columns), 0
    while True:
        try:
            rows = next(batches).to_pylist()
        except StopIteration:
            return
        except Exception as e:  # as above, for a damaged row group
            raise CorpusError(f"{path}: row {row} on: unreadable parquet data ({one_line(e)})") from None
        yield from rows
        row += len(rows)
