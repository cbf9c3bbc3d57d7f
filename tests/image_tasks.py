"""A one-image-per-doc task over rows a test writes, and an in-process `fastmmeval run` of it with the
scripted model (no weights): for tests of what images and rows a user hands us."""

from __future__ import annotations

import io
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import judge_fixtures  # noqa: F401  (registers scripted_student)
import pytest
from PIL import Image

from fastmmeval.cli import main

TASK = """\
task: img_qa
dataset: {{data_files: {{test: {rows}}}, image_root: images{extra}}}
split: test
doc_id: id
doc_to_messages: [{{role: user, content: [{{image: image}}, {{text: "{{question}}"}}]}}]
target: answer
output_type: generate
extractor: first_word
metrics: [exact_match]
"""


def png(size: tuple[int, int] = (8, 8), color: Any = (200, 30, 30), mode: str = "RGB") -> bytes:
    """A small PNG."""
    buf = io.BytesIO()
    Image.new(mode, size, color).save(buf, format="PNG")
    return buf.getvalue()


def declaring(width: int, height: int) -> bytes:
    """A 1x1 PNG whose header declares `width` x `height`: a decompression bomb as PIL sees it before
    decoding (a real one is a few hundred KB of compressed zeros; the header is what a cap must read)."""
    data = bytearray(png((1, 1)))
    ihdr = struct.pack(">II", width, height) + bytes(data[24:29])
    data[16:29] = ihdr
    data[29:33] = struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return bytes(data)


def write_task(folder: Path, rows: list[dict[str, Any]], images: dict[str, bytes] | None = None,
               dataset_extra: str = "", rows_file: str = "rows.jsonl") -> Path:
    """Task `img_qa` in `folder` over `rows` (jsonl, or parquet when `rows_file` ends so), with the
    files `images` under its image_root `images/`; `dataset_extra` is more of the dataset mapping."""
    (folder / "images").mkdir(parents=True, exist_ok=True)
    for name, data in (images or {}).items():
        (folder / "images" / name).write_bytes(data)
    if rows_file.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), folder / rows_file)
    else:
        (folder / rows_file).write_text("".join(json.dumps(r) + "\n" for r in rows))
    extra = f", {dataset_extra}" if dataset_extra else ""
    (folder / "img_qa.yaml").write_text(TASK.format(rows=rows_file, extra=extra))
    return folder


def run(tasks: Path, out: Path, *extra: str) -> int:
    """`fastmmeval run --tasks img_qa` in-process, the scripted model answering "ok" to every doc."""
    return main(["run", "--model", "scripted_student", "--model_args", "default=ok", "--tasks", "img_qa",
                 "--include_path", str(tasks), "--output_path", str(out), "--no_progress", "--bootstrap_iters", "0",
                 *extra])  # fmt: skip


def only_run(out: Path) -> Path:
    """The one run folder under `out`."""
    [folder] = [p for p in out.iterdir() if p.is_dir()]
    return folder


def samples(run_dir: Path) -> dict[str, dict[str, Any]]:
    """The run's img_qa samples by doc id (the last line of a doc wins, as on resume)."""
    lines = (run_dir / "samples" / "img_qa.jsonl").read_text().splitlines()
    return {s["doc_id"]: s for s in map(json.loads, lines)}


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The stderr of a failed command, checked to be one `fastmmeval: error:` line."""
    err = capsys.readouterr().err.strip()
    assert err.startswith("fastmmeval: error: ") and "\n" not in err, err
    return err
