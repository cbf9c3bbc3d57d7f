"""The embedded ``demo`` benchmark: real photos that install offline from PyPI, with true labels.

Every image comes from a file shipped inside an installed package (nothing is downloaded):

* scikit-image, ``skimage/data/``: ``astronaut.png`` (astronaut Eileen Collins, NASA portrait),
  ``chelsea.png`` (Stefan van der Walt's cat), ``coffee.png`` (espresso cup, Rachel Michetti),
  ``rocket.jpg`` (SpaceX Falcon 9 on its launch pad, public domain), ``camera.png`` (the "cameraman"
  photo), ``coins.png`` (Greek coins, Brooklyn Museum), ``horse.png`` (horse silhouette, openclipart),
  ``hubble_deep_field.jpg`` (Hubble eXtreme Deep Field, NASA), ``page.png`` (photo of a printed
  page), ``text.png`` (handwritten formulas), ``brick.png``, ``grass.png``, ``gravel.png``
  (texture photos), ``motorcycle_left.png`` (Middlebury stereo data set) and ``chessboard_RGB.png``.
* matplotlib, ``mpl-data/sample_data/``: ``grace_hopper.jpg`` (Rear Admiral Grace Hopper, US Navy
  portrait), ``Minduka_Present_Blue_Pack.png`` (a gift-box clip-art) and ``logo2.png`` (the matplotlib
  logo).
* scikit-learn, ``sklearn/datasets/images/``: ``china.jpg`` (a pagoda at the Summer Palace, Beijing)
  and ``flower.jpg`` (a dahlia); and ``sklearn.datasets.load_digits()`` (8x8 handwritten digits).

Each photo is converted to RGB (transparent pixels composited onto white) and shrunk to at most
640 px on its longest side. Each digit is drawn as a dark digit on a white background: its 0..16 ink
values are mapped to grey levels 255..0, enlarged 12x with nearest-neighbour to 96x96 and given a
16 px white margin, giving a 128x128 image.

Every label, question and answer below was checked by eye against the image it belongs to; facts that
were not unambiguous at a glance were dropped (see the notes next to ``DIGITS`` in ``demo_facts``). Multiple-choice
distractors are drawn with a fixed seed from a pool of plausible options, minus the options listed
in ``exclude`` (anything that could also be argued to be true of the image).
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from fastmmeval.errors import FastmmevalError
from fastmmeval.tasks.demo_facts import DIGITS, IMAGES, OBJECTS, POOLS, YESNO
from fastmmeval.tasks.sources import DATASET_BUILDERS

SEED = "fastmmeval-demo-v1"
MAX_SIDE = 640
DIGIT_SCALE = 12
DIGIT_MARGIN = 16

DATA_FILES = ("objects.jsonl", "digits.jsonl", "yesno.jsonl")
STAMP_FILE = ".build_stamp"
LETTERS = "ABCD"


def _package_file(package: str, relative: str) -> Path:
    """The path of a data file shipped inside an installed package (the package is not imported)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FastmmevalError(
            f"the demo data needs the {package!r} package; install it with `pip install fastmmeval[demo]`"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.is_file():
        raise FastmmevalError(f"demo image {path} is missing from the installed {package!r} package")
    return path


def _load_photo(package: str, relative: str) -> Image.Image:
    """Open a packaged photo as RGB (alpha composited onto white), at most MAX_SIDE px on a side."""
    with Image.open(_package_file(package, relative)) as src:
        src.load()
        if src.mode in ("RGBA", "LA", "P", "PA"):
            rgba = src.convert("RGBA")
            image = Image.new("RGB", rgba.size, (255, 255, 255))
            image.paste(rgba, mask=rgba.getchannel("A"))
        else:
            image = src.convert("RGB")
    if max(image.size) > MAX_SIDE:
        scale = MAX_SIDE / max(image.size)
        size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
        image = image.resize(size, Image.Resampling.LANCZOS)
    return image


def render_digit(pixels: np.ndarray) -> Image.Image:
    """An 8x8 sklearn digit (ink 0..16) as a 128x128 RGB image: dark digit on white, nearest-neighbour."""
    grey = 255 - np.round(np.asarray(pixels, dtype=np.float64) * (255 / 16)).astype(np.int64)
    grey = np.clip(grey, 0, 255).astype(np.uint8)
    big = np.kron(grey, np.ones((DIGIT_SCALE, DIGIT_SCALE), dtype=np.uint8))
    big = np.pad(big, DIGIT_MARGIN, constant_values=255)
    return Image.fromarray(big, mode="L").convert("RGB")


def _png_bytes(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=3)
    return buf.getvalue()


def _image_path(name: str) -> str:
    return f"images/{name}.png"


def _mc_rows() -> list[dict[str, Any]]:
    """objects.jsonl rows: seeded distractors and a seeded, evenly spread answer letter."""
    letters = [LETTERS[i % 4] for i in range(len(OBJECTS))]
    random.Random(f"{SEED}:letters").shuffle(letters)
    rows = []
    for fact, letter in zip(OBJECTS, letters, strict=True):
        answer = fact["answer"]
        banned = {answer.casefold(), *(x.casefold() for x in fact.get("exclude", []))}
        pool = [x for x in POOLS[fact["pool"]] if x.casefold() not in banned]
        distractors = random.Random(f"{SEED}:{fact['id']}").sample(pool, 3)
        choices = list(distractors)
        choices.insert(LETTERS.index(letter), answer)
        rows.append({
            "id": fact["id"],
            "image": _image_path(fact["image"]),
            "question": fact["question"],
            "choices": choices,
            "answer": letter,
            "category": fact["category"],
        })
    return rows


def _yesno_rows() -> list[dict[str, Any]]:
    """yesno.jsonl rows."""
    return [{**fact, "image": _image_path(fact["image"])} for fact in YESNO]


def _digit_rows() -> list[dict[str, Any]]:
    """digits.jsonl rows."""
    return [
        {
            "id": f"digit_{index:04d}",
            "image": _image_path(f"digit_{index:04d}"),
            "question": "What digit is shown in this image?",
            "answer": str(label),
            "category": "digits",
        }
        for index, label in DIGITS
    ]


def _images() -> dict[str, Image.Image]:
    """Every image the three files reference, by name."""
    used = {fact["image"] for fact in (*OBJECTS, *YESNO)}
    images = {name: _load_photo(*IMAGES[name]) for name in sorted(used)}
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        raise FastmmevalError(
            "the demo data needs scikit-learn; install it with `pip install fastmmeval[demo]`"
        ) from exc
    digits = load_digits()
    for index, label in DIGITS:
        if int(digits.target[index]) != label:
            raise FastmmevalError(f"sklearn digit {index} is labelled {digits.target[index]}, expected {label}")
        images[f"digit_{index:04d}"] = render_digit(digits.images[index])
    return images


def _jsonl_texts() -> dict[str, str]:
    """The three JSONL files' contents, by file name."""
    rows = {"objects.jsonl": _mc_rows(), "digits.jsonl": _digit_rows(), "yesno.jsonl": _yesno_rows()}
    return {
        name: "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows[name]) for name in DATA_FILES
    }


def _build_stamp(texts: dict[str, str]) -> str:
    """A hash of the facts and the image settings: a cached folder with another stamp is rebuilt."""
    h = hashlib.sha256(f"{SEED}|{MAX_SIDE}|{DIGIT_SCALE}|{DIGIT_MARGIN}|{sorted(IMAGES.items())}".encode())
    for name in DATA_FILES:
        h.update(name.encode() + b"\0" + texts[name].encode() + b"\0")
    return h.hexdigest()


def _expected_files() -> list[str]:
    """Relative paths of every file a complete build holds."""
    names = {fact["image"] for fact in (*OBJECTS, *YESNO)}
    names |= {f"digit_{index:04d}" for index, _ in DIGITS}
    return [STAMP_FILE, *DATA_FILES, *(_image_path(n) for n in sorted(names))]


def is_complete(out_dir: Path) -> bool:
    """True when `out_dir` holds every file of a finished build of this version of the demo data."""
    out_dir = Path(out_dir)
    stamp = out_dir / STAMP_FILE
    if not stamp.is_file() or stamp.read_text(encoding="utf-8").strip() != _build_stamp(_jsonl_texts()):
        return False
    return all((out_dir / rel).is_file() for rel in _expected_files())


@DATASET_BUILDERS.register("demo")
def build_demo(out_dir: Path) -> None:
    """Write the demo benchmark (images/*.png, objects/digits/yesno.jsonl) into `out_dir`.

    Deterministic and atomic: the files are written into a temporary folder next to `out_dir` and
    renamed into place. A complete `out_dir` is left untouched; one that is incomplete or was built from
    other facts (its `.build_stamp` differs) is replaced.
    """
    out_dir = Path(out_dir)
    if is_complete(out_dir):
        return
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        (tmp / "images").mkdir()
        for name, image in _images().items():
            (tmp / _image_path(name)).write_bytes(_png_bytes(image))
        texts = _jsonl_texts()
        for name, text in texts.items():
            (tmp / name).write_bytes(text.encode("utf-8"))
        (tmp / STAMP_FILE).write_text(_build_stamp(texts) + "\n", encoding="utf-8")
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700
        if out_dir.exists():
            if is_complete(out_dir):  # another process finished first
                return
            # An incomplete or outdated leftover: move it aside, then swap the new build in.
            stale = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.stale-", dir=out_dir.parent))
            os.replace(out_dir, stale / "old")
            shutil.rmtree(stale, ignore_errors=True)
        try:
            os.replace(tmp, out_dir)
        except OSError:
            if not is_complete(out_dir):  # lost a race to another builder, which finished: fine
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
