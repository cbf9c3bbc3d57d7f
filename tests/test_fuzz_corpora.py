"""Fuzzing the training-corpus loaders of `fastmmeval contam`: LLaVA JSON, JSONL and parquet shards of generated
records (wrong types, missing fields, huge strings, nested garbage, bad image references, non-UTF-8 bytes, cut
files) through `contam index`, in-process. The property: exit status 0, 1 (one `fastmmeval: error:` line
naming the shard) or a usage error (2), never another exception; a failed build publishes nothing, and a
finished one holds every token the readers read from the shard."""

from __future__ import annotations

import io
import itertools
import json
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from PIL import Image

from fastmmeval.cli import main
from fastmmeval.contam.ngram.index import NgramIndex
from fastmmeval.contam.readers.image_tokens import OfflineImageTokenizer
from fastmmeval.contam.readers.shards import open_sources
from fastmmeval.contam.readers.text_tokens import WordTokenizer

HUGE = "word " * 50_000
_count = itertools.count()


def _png(size: tuple[int, int] = (8, 8)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


def _bomb(side: int = 30_000) -> bytes:
    """A PNG of a few bytes declaring side x side pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")

    header = side.to_bytes(4, "big") * 2 + bytes([8, 2, 0, 0, 0])
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b"")


EMBEDDED = [_png(), _bomb(), _png()[:40], b"", b"<svg xmlns='http://www.w3.org/2000/svg'/>"]
PATHS = ["ok.png", "gone.png", "bomb.png", "cut.png", "text.png", "../../outside.png", "/etc/hostname", "", "."]


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with an image root (`data/img`: a good, a bomb, a cut and a text-as-PNG image), a file just
    outside it, and a folder for the shards and indexes of the examples."""
    base = tmp_path_factory.mktemp("fuzz")
    img = base / "data" / "img"
    img.mkdir(parents=True)
    (img / "ok.png").write_bytes(_png())
    (img / "bomb.png").write_bytes(_bomb())
    (img / "cut.png").write_bytes(_png()[:40])
    (img / "text.png").write_text("not an image")
    (base / "outside.png").write_bytes(_png())
    (base / "runs").mkdir()
    return base


leaves = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)  # NaN: JSON as Python writes it
garbage = st.recursive(
    leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)  # fmt: skip
texts = st.text(max_size=30) | st.just(HUGE) | st.sampled_from(["<image>\nWhat is on the table?", "A cup."])


def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`good` nine times in ten, else `bad`: enough well-formed records that builds also finish."""
    return st.integers(0, 9).flatmap(lambda k: bad if k == 0 else good)


image_refs = mostly(st.sampled_from(PATHS), garbage)
turns = mostly(st.fixed_dictionaries({"from": st.sampled_from(["human", "gpt"]), "value": texts}), garbage)
llava_records = mostly(
    st.fixed_dictionaries(
        {"conversations": mostly(st.lists(turns, max_size=3), garbage)},
        optional={"id": mostly(st.text(max_size=8), garbage), "image": image_refs | st.lists(image_refs, max_size=3)},
    ),
    garbage,
)
jsonl_rows = mostly(
    st.fixed_dictionaries(
        {},
        optional={
            "id": mostly(st.text(max_size=8), garbage),
            "text": texts | st.lists(texts | turns, max_size=3) | garbage,
            "image": image_refs | st.lists(image_refs, max_size=2),
        },
    ),
    garbage,
)
# What happens to the bytes of the shard: nothing, cut short, a byte that is not UTF-8, or deep nesting.
damage = st.tuples(st.sampled_from(["none", "none", "none", "cut", "not_utf8", "deep"]), st.floats(0, 1))


def _damaged(data: bytes, how: tuple[str, float]) -> bytes:
    kind, where = how
    at = int(where * len(data))
    if kind == "cut":
        return data[:at]
    if kind == "not_utf8":
        return data[:at] + b"\xff\xfe" + data[at:]
    if kind == "deep":
        return data[:at] + b"[" * 50_000 + data[at:]
    return data


# Parquet columns hold one type each: a column's kind is drawn, then its values (any of them may be null).
PARQUET_COLUMNS = {
    "text": {
        "str": texts,
        "int": st.integers(-(2**63), 2**63 - 1),
        "list": st.lists(texts, max_size=3),
        "turns": st.lists(st.fixed_dictionaries({"from": st.just("gpt"), "value": texts}), max_size=2),
        "binary": st.binary(max_size=20),
    },
    "image": {
        "path": st.sampled_from(PATHS),
        "bytes": st.sampled_from(EMBEDDED),
        "dict": st.fixed_dictionaries(
            {"bytes": st.sampled_from(EMBEDDED) | st.none(), "path": st.sampled_from(PATHS) | st.none()}
        ),
        "int": st.integers(0, 9),
    },
    "id": {"str": st.text(max_size=8), "int": st.integers(-(2**63), 2**63 - 1), "float": st.floats()},
}


@st.composite
def parquet_files(draw: Any) -> bytes:
    """The bytes of a parquet file of up to 6 rows, some columns of the wrong type or missing."""
    rows = draw(st.integers(0, 6))
    columns = {}
    for name, kinds in PARQUET_COLUMNS.items():
        if draw(st.integers(0, 9)) == 0:  # now and then a column is missing
            continue
        values = kinds[draw(st.sampled_from(sorted(kinds)))] | st.none()
        columns[name] = draw(st.lists(values, min_size=rows, max_size=rows))
    out = io.BytesIO()
    pq.write_table(pa.table(columns) if columns else pa.table({"other": [1] * rows}), out)
    return out.getvalue()


def _flipped(data: bytes, how: tuple[str, float]) -> bytes:
    """Parquet bytes cut short, or with one byte flipped, or as they are."""
    kind, where = how
    at = min(int(where * len(data)), len(data) - 1)
    if kind == "cut":
        return data[:at]
    if kind in ("not_utf8", "deep"):
        return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]
    return data


def _check_index(place: Path, shard: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`contam index` of the shard: exit 0, 1 with one line naming it, or 2; a failed build publishes nothing,
    a finished one holds every token the readers read."""
    index = place / "runs" / f"ix{next(_count)}"
    img = place / "data" / "img"
    try:
        rc = main(["contam", "index", "--index", str(index), "--no_progress", "--image_root", str(img), str(shard)])
    except SystemExit as e:
        rc = e.code
        assert rc == 2
    err = capsys.readouterr().err
    assert rc in (0, 1, 2)
    event(f"exit {rc}")  # --hypothesis-show-statistics: how often each is reached
    if rc == 1:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("fastmmeval: error: "), err
        assert str(shard) in lines[0], lines[0]
        if (index / "manifest.json").exists():
            assert json.loads((index / "manifest.json").read_text())["generations"] == []
    elif rc == 0:
        [source] = open_sources([str(shard)], "auto", WordTokenizer(), OfflineImageTokenizer(), img)
        read = sum(len(block.tokens) for block in source.blocks())
        assert NgramIndex.open(index).stats()["tokens"] == read
    shard.unlink()


@given(records=st.lists(llava_records, max_size=5), how=damage)
def test_llava_json_corpora(place: Path, capsys: pytest.CaptureFixture[str], records: list[Any], how: Any) -> None:
    shard = place / "data" / f"s{next(_count)}.json"
    shard.write_bytes(_damaged(json.dumps(records).encode(), how))
    _check_index(place, shard, capsys)


@given(rows=st.lists(jsonl_rows, max_size=5), how=damage, blank=st.booleans())
def test_jsonl_corpora(place: Path, capsys: pytest.CaptureFixture[str], rows: list[Any], how: Any, blank: bool) -> None:
    shard = place / "data" / f"s{next(_count)}.jsonl"
    lines = [json.dumps(row) for row in rows] + ([""] if blank else [])
    shard.write_bytes(_damaged("\n".join(lines).encode(), how))
    _check_index(place, shard, capsys)


@given(data=parquet_files(), how=damage)
def test_parquet_corpora(place: Path, capsys: pytest.CaptureFixture[str], data: bytes, how: Any) -> None:
    shard = place / "data" / f"s{next(_count)}.parquet"
    shard.write_bytes(_flipped(data, how))
    _check_index(place, shard, capsys)
