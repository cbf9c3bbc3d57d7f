"""Task images: a pixel cap checked before decoding, paths kept inside the dataset's image root, and
every kind of image file either decoded to RGB or failing its doc as unreadable."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from image_tasks import declaring, one_error_line, only_run, png, run, samples, write_task
from PIL import Image

from fastmmeval.errors import DocError, FailureKind
from fastmmeval.images import DEFAULT_MAX_PIXELS, ImageRefused, open_image, to_rgb
from fastmmeval.protocol import ImagePart
from fastmmeval.tasks import Catalog, Task, resolve
from fastmmeval.tasks.render import load_image

ROWS = [{"id": f"d{i}", "image": f"{i}.png", "question": f"q{i}?", "answer": "ok"} for i in range(4)]


def test_a_decompression_bomb_fails_its_doc_the_others_score_and_resume_finishes(tmp_path: Path) -> None:
    images = {f"{i}.png": png() for i in range(4)} | {"1.png": declaring(20000, 20000)}
    tasks = write_task(tmp_path / "tasks", ROWS, images)
    assert run(tasks, tmp_path / "runs") == 0
    folder = only_run(tmp_path / "runs")
    by_id = samples(folder)
    bomb = by_id["d1"]
    assert bomb["failure_kind"] == FailureKind.UNREADABLE_IMAGE.value
    assert "task img_qa, doc d1" in bomb["failed"] and "1.png" in bomb["failed"]
    assert "400,000,000 pixels, over the cap" in bomb["failed"] and "--max_image_pixels" in bomb["failed"]
    assert all(by_id[d]["failed"] is None for d in ("d0", "d2", "d3"))
    results = json.loads((folder / "results.json").read_text())
    assert results["results"]["img_qa"]["n_failed"] == 1
    assert results["config"]["max_image_pixels"] == DEFAULT_MAX_PIXELS

    lines = (folder / "samples" / "img_qa.jsonl").read_text()
    assert run(tasks, tmp_path / "runs", "--resume") == 0  # the doc stays failed; nothing is asked again
    assert (folder / "samples" / "img_qa.jsonl").read_text() == lines


def test_the_cap_is_a_run_setting_recorded_in_results_not_protocol(tmp_path: Path) -> None:
    tasks = write_task(tmp_path / "tasks", ROWS[:2], {"0.png": png((8, 8)), "1.png": png((40, 40))})
    assert run(tasks, tmp_path / "runs", "--max_image_pixels", "1000") == 0
    folder = only_run(tmp_path / "runs")
    by_id = samples(folder)
    assert by_id["d0"]["failed"] is None and "40x40 = 1,600 pixels" in by_id["d1"]["failed"]
    assert json.loads((folder / "results.json").read_text())["config"]["max_image_pixels"] == 1000
    [low] = resolve(["img_qa"], [tasks], max_image_pixels=1000)
    [default] = resolve(["img_qa"], [tasks])
    assert low.fingerprint() == default.fingerprint()


@pytest.mark.parametrize("value", ["0", "-5", "many"])
def test_a_cap_that_is_not_a_positive_integer_is_a_usage_error(value: str, tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as e:
        run(tmp_path, tmp_path / "runs", "--max_image_pixels", value)
    assert e.value.code == 2


def test_a_declared_size_over_the_cap_is_refused_before_any_pixel_is_decoded() -> None:
    with pytest.raises(ImageRefused, match="over the cap of 64,000,000"):
        open_image(declaring(100_000, 100_000))
    assert open_image(png((30, 30)), max_pixels=None).size == (30, 30)


def test_paths_that_leave_the_image_root_fail_their_doc_naming_doc_and_path(tmp_path: Path) -> None:
    outside = tmp_path / "outside.png"
    outside.write_bytes(png())
    rows = [
        {"id": "up", "image": "../../../../etc/passwd", "question": "q", "answer": "ok"},
        {"id": "abs", "image": str(outside), "question": "q", "answer": "ok"},
        {"id": "link", "image": "link.png", "question": "q", "answer": "ok"},
        {"id": "dict", "image": {"path": "../outside.png", "bytes": None}, "question": "q", "answer": "ok"},
        {"id": "fine", "image": "sub/../0.png", "question": "q", "answer": "ok"},
    ]
    tasks = write_task(tmp_path / "tasks", rows, {"0.png": png()})
    os.symlink(outside, tasks / "images" / "link.png")
    assert run(tasks, tmp_path / "runs") == 0
    by_id = samples(only_run(tmp_path / "runs"))
    assert by_id["fine"]["failed"] is None
    assert by_id["link"]["failed"] is None  # a symlink the root's owner placed is followed
    reasons = {d: by_id[d]["failed"] for d in ("up", "abs", "dict")}
    assert all(by_id[d]["failure_kind"] == FailureKind.UNREADABLE_IMAGE.value for d in reasons)
    assert "doc up" in reasons["up"] and "'../../../../etc/passwd' leaves its root" in reasons["up"]
    assert f"absolute image path {str(outside)!r} refused" in reasons["abs"]
    assert "allow_absolute_paths: true or --allow_absolute_image_paths" in reasons["abs"]
    assert "'../outside.png' leaves" in reasons["dict"]


def test_absolute_paths_open_where_the_task_file_or_the_run_flag_allows_them(tmp_path: Path) -> None:
    image = tmp_path / "elsewhere.png"
    image.write_bytes(png())
    rows = [{"id": "abs", "image": str(image), "question": "q", "answer": "ok"}]
    refused = write_task(tmp_path / "refused", rows)
    allowed = write_task(tmp_path / "allowed", rows, dataset_extra="allow_absolute_paths: true")
    assert run(refused, tmp_path / "by_flag", "--allow_absolute_image_paths") == 0
    assert samples(only_run(tmp_path / "by_flag"))["abs"]["failed"] is None
    assert run(allowed, tmp_path / "by_file") == 0
    assert samples(only_run(tmp_path / "by_file"))["abs"]["failed"] is None
    # The key is protocol only when set: written false, the fingerprint is that of a file without it.
    write_task(tmp_path / "false", rows, dataset_extra="allow_absolute_paths: false")
    prints = [resolve(["img_qa"], [tmp_path / d])[0].config.fingerprint() for d in ("refused", "false", "allowed")]
    assert prints[0] == prints[1] != prints[2]


def test_no_builtin_task_relies_on_absolute_image_paths() -> None:
    configs = [c for _, c in Catalog().tasks.items()]
    assert not [c.task for c in configs if c.dataset.allow_absolute_paths]
    for config in configs:
        if config.dataset.builder:  # the demo tasks: image files next to their rows
            task = Task(config)
            for ref in task.doc_refs():
                task.request(task.doc(ref), seed=0)


def test_a_non_boolean_allow_absolute_paths_is_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fastmmeval.cli import main

    write_task(tmp_path, ROWS[:1], dataset_extra="allow_absolute_paths: yes please")
    assert main(["tasks", "--include_path", str(tmp_path)]) == 1
    assert "img_qa.yaml:2: field 'allow_absolute_paths': expected bool" in one_error_line(capsys)


def encoded(image: Image.Image, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt, **kw)
    return buf.getvalue()


def test_sixteen_bit_grey_is_scaled_to_eight_bits_in_either_byte_order() -> None:
    for mode, dtype in (("I;16", "<u2"), ("I;16B", ">u2"), ("I;16L", "<u2")):
        import numpy as np

        grey = Image.frombytes(mode, (2, 1), np.array([32768, 65535], dtype=dtype).tobytes())
        assert [to_rgb(grey).getpixel((x, 0)) for x in (0, 1)] == [(128, 128, 128), (255, 255, 255)], mode
    from_png = open_image(encoded(Image.frombytes("I;16", (1, 1), b"\x00\x80"), "PNG"))
    assert from_png.mode == "I;16" and to_rgb(from_png).getpixel((0, 0)) == (128, 128, 128)


def test_a_mode_pil_cannot_make_rgb_fails_the_doc() -> None:
    with pytest.raises(DocError, match="mode La cannot be converted to RGB") as e:
        load_image(Image.new("La", (2, 2)), None, "doc x")
    assert e.value.kind is FailureKind.UNREADABLE_IMAGE


def test_animated_images_give_their_first_frame() -> None:
    frames = [Image.new("RGB", (6, 6), c) for c in ((255, 0, 0), (0, 0, 255))]
    for fmt in ("GIF", "WEBP"):
        data = encoded(frames[0], fmt, save_all=True, append_images=frames[1:], lossless=True)
        [part] = load_image(data, None, "doc x")
        assert part.image.mode == "RGB" and part.image.getpixel((3, 3)) == (255, 0, 0), fmt


# --- fuzz: generated images and bytes through load_image -------------------------------------------

FORMATS = {  # the modes each of Pillow's writers takes
    "PNG": {"1", "L", "LA", "P", "RGB", "RGBA", "I;16"},
    "GIF": {"1", "L", "LA", "P", "RGB", "RGBA", "I;16", "I", "F"},
    "WEBP": {"1", "L", "LA", "P", "RGB", "RGBA", "CMYK", "I;16", "I", "F", "YCbCr"},
    "TIFF": {"1", "L", "LA", "P", "RGB", "RGBA", "CMYK", "I;16", "I", "F", "YCbCr"},
    "JPEG": {"1", "L", "RGB", "CMYK", "YCbCr"},
    "BMP": {"1", "L", "P", "RGB", "RGBA"},
}


@st.composite
def image_bytes(draw: st.DrawFn) -> bytes:
    """An encoded image of some mode and format, maybe damaged; or bytes that are no image at all."""
    kind = draw(st.sampled_from(["image", "image", "image", "bomb", "svg", "text", "random", "empty"]))
    if kind == "bomb":
        return declaring(draw(st.integers(8001, 60000)), draw(st.integers(8001, 60000)))
    if kind == "svg":
        return b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="10" height="10"/></svg>'
    if kind == "text":
        return draw(st.text(max_size=200)).encode()
    if kind == "random":
        return draw(st.binary(min_size=1, max_size=300))
    if kind == "empty":
        return b""
    fmt = draw(st.sampled_from(sorted(FORMATS)))
    mode = draw(st.sampled_from(sorted(FORMATS[fmt])))
    size = (draw(st.integers(1, 24)), draw(st.integers(1, 24)))
    image = Image.new(mode, size)
    image.putdata([draw(st.integers(0, 255)) if mode in ("1", "L", "P", "I;16", "I", "F") else (
        tuple(draw(st.integers(0, 255)) for _ in image.getbands())) for _ in range(size[0] * size[1])])
    options: dict[str, object] = {}
    if mode == "P" and fmt in ("PNG", "GIF") and draw(st.booleans()):
        options["transparency"] = draw(st.integers(0, 255))
    if fmt in ("GIF", "WEBP", "PNG") and draw(st.booleans()):  # animated
        options |= {"save_all": True, "append_images": [Image.new(mode, size)]}
    data = encoded(image, fmt, **options)
    damage = draw(st.sampled_from(["none", "none", "truncate", "flip"]))
    if damage == "truncate":
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif damage == "flip":
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1 :]
    return data


@given(data=image_bytes(), as_=st.sampled_from(["bytes", "dict", "file", "list"]))
def test_any_image_decodes_to_rgb_or_fails_its_doc_as_unreadable(tmp_path_factory, data: bytes, as_: str) -> None:
    root = tmp_path_factory.mktemp("imgs", numbered=True)
    (root / "x.png").write_bytes(data)
    value = {"bytes": data, "path": "x.png"} if as_ == "dict" else "x.png" if as_ == "file" else data
    try:
        parts = load_image([value] if as_ == "list" else value, root, "doc x", max_pixels=DEFAULT_MAX_PIXELS)
    except DocError as e:
        assert e.kind is FailureKind.UNREADABLE_IMAGE and str(e).startswith("doc x: unreadable image"), e
        return
    assert data and all(isinstance(p, ImagePart) and p.image.mode == "RGB" for p in parts)


def test_hub_rows_decoded_by_datasets_are_held_to_the_run_s_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    from fastmmeval.tasks.sources import Rows

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", DEFAULT_MAX_PIXELS // 2 + 1)  # as fastmmeval.images sets it
    bomb = {"bytes": declaring(20000, 20000), "path": None}
    table = datasets.Dataset.from_dict({"image": [{"bytes": png(), "path": None}, bomb]})
    rows = Rows(table.cast_column("image", datasets.Image()), None, {})
    assert rows[0]["image"].size == (8, 8)
    with pytest.raises(DocError, match="DecompressionBombError") as refused:
        rows[1]
    assert refused.value.kind is FailureKind.UNREADABLE_IMAGE and "--max_image_pixels" in str(refused.value)
    Task(Catalog().tasks.get("demo_digits"), max_image_pixels=10**9)  # a run's larger cap reaches PIL too
    with pytest.raises(DocError, match="unreadable|cannot be decoded") as read:
        rows[1]  # now decoded, and found truncated
    assert "DecompressionBombError" not in str(read.value)


def test_docs_failing_on_different_image_files_are_one_reason(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    tasks = write_task(tmp_path / "tasks", ROWS, {"0.png": png()})  # 1.png, 2.png and 3.png are missing
    assert run(tasks, tmp_path / "runs") == 0
    err = capsys.readouterr().err
    assert "img_qa: 3 of 4 docs failed" in err
    [reason] = [line for line in err.splitlines() if line.startswith("  ")]
    assert reason.startswith("  3 x unreadable image: field 'image': unreadable image <path>: FileNotFoundError")
    assert "(e.g. field 'image': unreadable image " in reason and "1.png" in reason  # one of them, in full
