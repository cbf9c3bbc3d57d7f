"""Dataset sources (jsonl + image folder, parquet, save_to_disk) and prompt rendering."""

import io
import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from fastmmeval.errors import ConfigError, DocError
from fastmmeval.protocol import ImagePart, TextPart
from fastmmeval.tasks.config import DatasetSpec
from fastmmeval.tasks.messages import MessageTemplate
from fastmmeval.tasks.render import load_image, render_messages
from fastmmeval.tasks.sources import load_rows


def png_bytes(color: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), color).save(buf, format="PNG")
    return buf.getvalue()


def test_jsonl_rows_with_an_image_folder(tmp_path: Path) -> None:
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "red.png").write_bytes(png_bytes((255, 0, 0)))
    (tmp_path / "d.jsonl").write_text(json.dumps({"id": "a", "image": "red.png", "q": "color?"}) + "\n")
    spec = DatasetSpec(data_files={"test": ["d.jsonl"]}, image_root="imgs", base_dir=str(tmp_path))
    rows = load_rows(spec, "test")
    assert len(rows) == 1 and rows[0]["q"] == "color?" and rows.column("id") == ["a"]
    [part] = load_image(rows[0]["image"], rows.image_root, "doc a")
    assert part.image.getpixel((0, 0)) == (255, 0, 0)


def test_parquet_rows_in_the_hub_image_layout(tmp_path: Path) -> None:
    table = pa.table({"question": ["q"], "image": [{"bytes": png_bytes((0, 0, 255)), "path": "x.png"}]})
    pq.write_table(table, tmp_path / "test-00000.parquet")
    rows = load_rows(DatasetSpec(data_files={"test": ["test-00000.parquet"]}, base_dir=str(tmp_path)), "test")
    [part] = load_image(rows[0]["image"], rows.image_root, "doc 0")
    assert part.image.getpixel((0, 0)) == (0, 0, 255)


def test_load_from_disk_folder_with_decoded_images(tmp_path: Path) -> None:
    ds = datasets.Dataset.from_dict(
        {"question": ["q1", "q2"], "image": [Image.new("RGB", (4, 4), "white"), Image.new("RGB", (4, 4), "black")]},
        features=datasets.Features({"question": datasets.Value("string"), "image": datasets.Image()}),
    )
    datasets.DatasetDict({"val": ds}).save_to_disk(str(tmp_path / "saved"))
    rows = load_rows(DatasetSpec(load_from_disk="saved", base_dir=str(tmp_path)), "val")
    assert len(rows) == 2 and isinstance(rows[1]["image"], Image.Image)
    with pytest.raises(ConfigError, match="has no split 'test'"):
        load_rows(DatasetSpec(load_from_disk="saved", base_dir=str(tmp_path)), "test")


def test_an_unreachable_hub_dataset_says_so_in_one_line() -> None:
    with pytest.raises(ConfigError, match="cannot load hub dataset 'lmms-lab/no-such-set'"):
        load_rows(DatasetSpec(path="lmms-lab/no-such-set"), "test")


def test_bad_jsonl_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"id": 1}\n{"id": 2,\n')
    with pytest.raises(ConfigError, match=r"d.jsonl:2: not valid JSON"):
        load_rows(DatasetSpec(data_files={"test": ["d.jsonl"]}, base_dir=str(tmp_path)), "test")


def test_messages_render_text_and_images_and_name_missing_fields(tmp_path: Path) -> None:
    template = (MessageTemplate("user", (("image", "img"), ("text", "Q: {question} ({n:02d})"))),)
    fields = {"img": Image.new("L", (3, 3)), "question": "why?", "n": 7}
    [message] = render_messages(template, fields, None, "task t, doc 1")
    assert isinstance(message.content[0], ImagePart) and message.content[0].image.mode == "RGB"
    assert message.content[1] == TextPart("Q: why? (07)")
    assert message.text == "<image>Q: why? (07)"
    with pytest.raises(DocError, match="task t, doc 1: missing field 'question'"):
        render_messages(template, {"img": fields["img"], "n": 1}, None, "task t, doc 1")


def test_unreadable_images_are_doc_errors_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "broken.png").write_bytes(b"not a png")
    with pytest.raises(DocError, match=r"doc 3: unreadable image .*broken.png: UnidentifiedImageError"):
        load_image("broken.png", tmp_path, "doc 3")
    with pytest.raises(DocError, match="unreadable image .*missing.png: FileNotFoundError"):
        load_image("missing.png", tmp_path, "doc 3")
