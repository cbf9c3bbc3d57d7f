"""What `fastmmeval contam` says about bad input: one line naming the file (and line or record), exit 1; images
that cannot or may not be read (missing, over the pixel cap, outside the image root) counted and named; new
segments on disk before the manifest publishes them."""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image
from test_contam_scan import _local_task

from fastmmeval.cli import main
from fastmmeval.contam.audit import report
from fastmmeval.contam.ngram import index as index_module
from fastmmeval.contam.ngram.image_cache import Entry, ImageTokenCache
from fastmmeval.contam.ngram.settings import CorpusError
from fastmmeval.contam.readers.image_tokens import OfflineImageTokenizer
from fastmmeval.contam.readers.shards import RecordSource
from fastmmeval.contam.readers.text_tokens import WordTokenizer

TURNS = [{"from": "human", "value": "<image>\nWhat is shown?"}, {"from": "gpt", "value": "A red square."}]


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fastmmeval: error: "), err
    return err[0]


def _index(tmp_path: Path, *args: str) -> int:
    return main(["contam", "index", "--index", str(tmp_path / "ix"), "--no_progress", *args])


def _bomb_png(path: Path, side: int = 20_000) -> None:
    """A tiny PNG that declares side x side pixels (its pixel data is left out: the declared size is enough)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")

    header = side.to_bytes(4, "big") * 2 + bytes([8, 2, 0, 0, 0])
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b""))


def test_non_utf8_llava_json_names_the_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shard = tmp_path / "train.json"
    shard.write_bytes(b'[\n{"id": "a", "conversations": []},\n{"id": "caf\xe9", "conversations": []}\n]\n')
    assert _index(tmp_path, str(shard)) == 1
    assert _error_line(capsys) == f"fastmmeval: error: {shard}:3: not UTF-8 text (byte 48 of the file)"


def test_non_utf8_jsonl_and_mistyped_rows_name_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jsonl = tmp_path / "train.jsonl"
    jsonl.write_bytes(b'{"id": 1, "text": "fine"}\n\n{"id": 2, "text": "caf\xe9"}\n')
    assert _index(tmp_path, str(jsonl)) == 1
    assert _error_line(capsys) == f"fastmmeval: error: {jsonl}:3: not UTF-8 text (byte 23 of the line)"
    jsonl.write_text('{"id": 1, "text": "fine"}\n{"id": 2, "text": ' + "[" * 100_000 + "\n")
    assert _index(tmp_path, str(jsonl)) == 1
    assert _error_line(capsys) == f"fastmmeval: error: {jsonl}:2: JSON nested too deeply"
    parquet = tmp_path / "train.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "text": [1, 2], "image": [None, None]}), parquet)
    assert _index(tmp_path, str(parquet)) == 1
    assert _error_line(capsys) == (
        f"fastmmeval: error: {parquet}: row 0: field 'text' must hold strings or {{'from', 'value'}} turns"
    )
    # Nothing was published, so the same command takes the index up again once the shard is fixed.
    jsonl.write_text('{"id": 1, "text": "fine"}\n')
    assert _index(tmp_path, str(jsonl)) == 0


def test_index_on_an_existing_index_suggests_contam_add(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shard = tmp_path / "train.jsonl"
    shard.write_text('{"id": 1, "text": "a few words of training text here"}\n')
    assert _index(tmp_path, str(shard), "--image_tokenizer", "none") == 0
    capsys.readouterr()
    assert _index(tmp_path, str(shard), "--image_tokenizer", "none") == 1
    assert f"already holds an index; add shards to it with `fastmmeval contam add --index {tmp_path / 'ix'}`" in (
        _error_line(capsys)
    )


def test_scan_out_naming_a_file_is_refused_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "report").write_text("not a folder")
    shard = tmp_path / "train.jsonl"
    shard.write_text('{"id": 1, "text": "words"}\n')
    for out, why in ((tmp_path / "report", "is a file, not a folder"), (tmp_path / "report" / "sub", "is a file")):
        rc = main(["contam", "scan", "--corpus", str(shard), "--tasks", "no_such_task", "--out", str(out)])
        assert rc == 1 and why in _error_line(capsys)


def test_unreadable_images_are_counted_and_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "data"
    (root / "img").mkdir(parents=True)
    Image.new("RGB", (16, 16), (200, 10, 10)).save(root / "img" / "ok.png")
    _bomb_png(root / "img" / "bomb.png")
    Image.new("RGB", (8, 8), (0, 0, 200)).save(tmp_path / "secret.png")
    refs = ["ok.png", "gone.png", "bomb.png", "../../secret.png", str(tmp_path / "secret.png")]
    records = [{"id": f"r{i}", "image": ref, "conversations": TURNS} for i, ref in enumerate(refs)]
    shard = root / "train.json"
    shard.write_text(json.dumps(records))
    assert _index(tmp_path, str(shard), "--image_root", str(root / "img")) == 0
    out = capsys.readouterr().out
    manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    [generation] = manifest["generations"]
    assert generation["missing_images"] == 4
    named = generation["missing_image_refs"]
    assert [ref.split(" (")[0] for ref in named] == [
        f"{shard}: record r1: 'gone.png'",
        f"{shard}: record r2: 'bomb.png'",
        f"{shard}: record r3: '../../secret.png'",
        f"{shard}: record r4: '{tmp_path / 'secret.png'}'",
    ]
    assert "No such file or directory" in named[0] and "over the cap of 64,000,000" in named[1]
    assert "leaves its root" in named[2] and "(absolute path; --allow_absolute_image_paths reads it)" in named[3]
    assert all(f"  {ref}" in out for ref in named)
    # The absolute path is read when allowed; a lower cap refuses the ordinary image too.
    args = ("--image_root", str(root / "img"), "--allow_absolute_image_paths", "--max_image_pixels", "100")
    assert main(["contam", "index", "--index", str(tmp_path / "ix2"), "--no_progress", *args, str(shard)]) == 0
    again = json.loads((tmp_path / "ix2" / "manifest.json").read_text())["generations"][0]
    assert again["missing_images"] == 4 and "record r4" not in " ".join(again["missing_image_refs"])
    assert "record r0: 'ok.png' (16x16 = 256 pixels, over the cap of 100" in again["missing_image_refs"][0]


def test_a_damaged_image_cache_entry_names_it_and_no_image_cache(tmp_path: Path) -> None:

    entry = tmp_path / "entry"
    entry.mkdir()
    (entry / "tokens.u32").write_bytes(bytes(4 * 32))
    (entry / "tokens.u32.offsets").write_bytes(bytes(8))
    (entry / "ids.jsonl").write_text("")  # cut short: no id for the one image
    with pytest.raises(CorpusError, match=rf"^image-token cache entry {entry} is damaged .*--no_image_cache"):
        list(Entry(entry, {}).blocks(1 << 10))
    (entry / "tokens.u32.offsets").write_bytes((5).to_bytes(8, "little"))
    (entry / "ids.jsonl").write_text('"r1"\n')
    with pytest.raises(CorpusError, match=r"offsets must start at 0.*--no_image_cache to tokenize"):
        list(Entry(entry, {}).blocks(1 << 10))


@pytest.mark.parametrize("durable", [True, False])
def test_segments_reach_the_disk_before_the_manifest_publishes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durable: bool
) -> None:
    events: list[str] = []
    real_fsync, real_write = os.fsync, index_module.write_json_atomic
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd)))
    monkeypatch.setattr(
        index_module, "write_json_atomic", lambda path, data: (events.append(f"publish {path}"), real_write(path, data))
    )
    shard = tmp_path / "train.jsonl"
    shard.write_text("".join(json.dumps({"id": i, "text": f"document {i} " * 40}) + "\n" for i in range(50)))
    create = len(events)
    flags = ("--fsync",) if durable else ()
    assert _index(tmp_path, str(shard), "--image_tokenizer", "none", *flags) == 0
    ix = tmp_path / "ix"
    publish = events.index(f"publish {ix / 'manifest.json'}", create + 1)
    segments = sorted(str(p) for p in (ix / "seg").glob("g*/p*.seg"))
    synced = set(events[create:publish])
    assert segments
    if durable:
        assert set(segments) | {str(Path(segments[0]).parent), str(ix / "seg")} <= synced
        assert str(ix) in events[publish:]  # the manifest's rename
    else:
        assert not synced & set(segments)


def test_a_full_disk_or_a_bad_index_folder_is_one_line_and_keeps_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shard = tmp_path / "train.jsonl"
    shard.write_text('{"id": 1, "text": "a few words of training text here"}\n')
    (tmp_path / "file").write_text("")
    rc = main(["contam", "index", "--index", str(tmp_path / "file" / "ix"), "--no_progress", str(shard)])
    assert rc == 1 and "file/ix: cannot create an index there (" in _error_line(capsys)
    assert _index(tmp_path, str(shard), "--image_tokenizer", "none") == 0
    before = (tmp_path / "ix" / "manifest.json").read_bytes()

    def full(path: Path, data: object) -> None:
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(index_module, "write_json_atomic", full)
    capsys.readouterr()
    more = tmp_path / "more.jsonl"  # another shard: the same one again would be skipped, writing nothing
    more.write_text('{"id": 2, "text": "a few more words of training text"}\n')
    assert main(["contam", "add", "--index", str(tmp_path / "ix"), "--no_progress", str(more)]) == 1
    line = _error_line(capsys)
    assert "ix: add stopped ([Errno 28] No space left on device" in line and "the next add sweeps" in line
    assert (tmp_path / "ix" / "manifest.json").read_bytes() == before


def test_scan_reads_the_benchmark_images_under_the_same_cap(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    Image.new("RGB", (40, 30), (250, 200, 0)).save(tasks / "yellow.png")
    rows = [{"id": "q1", "image": "yellow.png", "question": "Which colour is it?", "answer": "yellow"}]
    _local_task(tasks, "local_cap", rows)
    corpus = tmp_path / "train.jsonl"
    corpus.write_text(json.dumps({"id": "t1", "text": "Which colour is it? Yellow."}) + "\n")
    args = ["contam", "scan", "--include_path", str(tasks), "--tasks", "local_cap", "--corpus", str(corpus),
            "--image_tokenizer", "none", "--no_progress", "--max_image_pixels", "1000"]  # fmt: skip
    assert main([*args, "--out", str(tmp_path / "out")]) == 0
    [q1] = json.loads((tmp_path / "out" / "contam_report.json").read_text())["tasks"]["local_cap"]["instance_results"]
    assert "1,200 pixels, over the cap of 1,000" in q1["error"]


def test_a_report_that_cannot_be_written_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def full(path: Path, data: object) -> None:
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(report, "write_json_atomic", full)
    corpus = tmp_path / "train.jsonl"
    corpus.write_text(json.dumps({"id": "t1", "text": "Is the sky blue today?"}) + "\n")
    args = ["contam", "scan", "--tasks", "demo_yesno", "--corpus", str(corpus), "--image_tokenizer", "none",
            "--no_progress", "--limit", "2", "--out", str(tmp_path / "out")]  # fmt: skip
    assert main(args) == 1
    assert "out: cannot write the report ([Errno 28] No space left on device" in _error_line(capsys)


def test_paths_with_a_nul_byte_or_a_symlink_loop_count_as_unreadable(tmp_path: Path) -> None:

    (tmp_path / "loop.png").symlink_to(tmp_path / "loop.png")
    records = [{"id": "a", "image": "bad\u0000name.png", "conversations": TURNS},
               {"id": "b", "image": "loop.png", "conversations": TURNS},
               {"id": "c", "image": str(tmp_path / "nul\u0000.png"), "conversations": TURNS}]  # fmt: skip
    shard = tmp_path / "train.json"
    shard.write_text(json.dumps(records))
    for allow in (False, True):
        cache = ImageTokenCache(tmp_path / f"cache-{allow}", write=True)  # which states each image file
        source = RecordSource(
            shard, "llava", WordTokenizer(), OfflineImageTokenizer(), tmp_path, image_cache=cache,
            allow_absolute_paths=allow,
        )  # fmt: skip
        list(source.blocks())
        assert source.missing_images() == 3
        assert [ref.split(":")[0] for ref in source.missing_image_refs()] == ["record a", "record b", "record c"]


def test_a_record_id_holding_a_lone_surrogate_is_written_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found by tests/test_fuzz_corpora.py: JSON can escape half a surrogate pair, which no UTF-8 output holds.
    shard = tmp_path / "train.jsonl"
    shard.write_text('{"id": "a\\ud800b", "text": "some words", "image": "gone.png"}\n')
    assert _index(tmp_path, str(shard)) == 0
    assert "record a\\ud800b: 'gone.png'" in capsys.readouterr().out
