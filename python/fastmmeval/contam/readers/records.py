"""Training records as the corpus readers see them: one example's id, text documents and image references;
and the reader of LLaVA instruction JSON (a top-level array, parsed one record at a time)."""

from __future__ import annotations

import json
from collections.abc import Iterator
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


def strip_placeholders(text: str) -> str:
    """The text with the `<image>` placeholder (where LLaVA prompts put the image) removed."""
    return text.replace("<image>", " ")


def iter_json_array(path: Path) -> Iterator[Any]:
    """The elements of a top-level JSON array, parsed one at a time (memory bounded by the largest element)."""
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
    return Record(str(obj.get("id", f"{path.name}#{index}")), texts, images)
