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
were not unambiguous at a glance were dropped (see the notes next to ``_DIGITS``). Multiple-choice
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
from fastmmeval.tasks.sources import DATASET_BUILDERS

SEED = "fastmmeval-demo-v1"
MAX_SIDE = 640
DIGIT_SCALE = 12
DIGIT_MARGIN = 16

# name -> (package, path inside the package's folder). Only files present on disk are used.
_IMAGES: dict[str, tuple[str, str]] = {
    "astronaut": ("skimage", "data/astronaut.png"),
    "chelsea": ("skimage", "data/chelsea.png"),
    "coffee": ("skimage", "data/coffee.png"),
    "rocket": ("skimage", "data/rocket.jpg"),
    "camera": ("skimage", "data/camera.png"),
    "coins": ("skimage", "data/coins.png"),
    "horse": ("skimage", "data/horse.png"),
    "hubble_deep_field": ("skimage", "data/hubble_deep_field.jpg"),
    "page": ("skimage", "data/page.png"),
    "text": ("skimage", "data/text.png"),
    "brick": ("skimage", "data/brick.png"),
    "grass": ("skimage", "data/grass.png"),
    "gravel": ("skimage", "data/gravel.png"),
    "motorcycle": ("skimage", "data/motorcycle_left.png"),
    "chessboard": ("skimage", "data/chessboard_RGB.png"),
    "grace_hopper": ("matplotlib", "mpl-data/sample_data/grace_hopper.jpg"),
    "present": ("matplotlib", "mpl-data/sample_data/Minduka_Present_Blue_Pack.png"),
    "matplotlib_logo": ("matplotlib", "mpl-data/sample_data/logo2.png"),
    "china": ("sklearn", "datasets/images/china.jpg"),
    "flower": ("sklearn", "datasets/images/flower.jpg"),
}

# Distractor pools for the multiple-choice questions.
_POOLS: dict[str, list[str]] = {
    "subject": [
        "A cat", "A dog", "A horse", "A cow", "A bird", "A motorcycle", "A bicycle", "A car",
        "A rocket", "An airplane", "A boat", "A train", "A cup of coffee", "A flower", "A gift box",
        "A pagoda", "A clock", "A pizza", "A banana", "A laptop", "A guitar", "An umbrella",
        "A chair", "A teddy bear",
    ],
    "animal": ["Cat", "Dog", "Horse", "Cow", "Sheep", "Rabbit", "Elephant", "Bird", "Fish", "Pig"],
    "color": ["Red", "Orange", "Yellow", "Green", "Blue", "Purple", "Pink", "White", "Black", "Brown",
              "Gray"],
    "utensil": ["A spoon", "A fork", "A knife", "Chopsticks", "A whisk"],
    "place": ["In a garage", "On a beach", "In a forest", "On a snowy mountain", "In a swimming pool"],
    "distance": ["A lake", "A desert", "Snow-capped mountains", "A volcano", "A glacier"],
    "objects": ["Coins", "Keys", "Marbles", "Playing cards", "Seashells", "Pencils"],
    "number": ["2", "3", "4", "5", "6"],
    "person": ["An astronaut", "A chef", "A doctor", "A police officer", "A clown", "A farmer"],
    "flag": ["The United States", "Japan", "Canada", "Germany", "Brazil", "Italy"],
    "eyewear": ["Glasses", "An eye patch", "A blindfold", "Ski goggles"],
    "device": ["A camera", "A guitar", "A book", "A telephone", "An umbrella"],
    "pattern": ["A checkerboard", "Horizontal stripes", "Polka dots", "A spiral", "Zigzag lines"],
    "scene": ["Galaxies in outer space", "A city street", "A coral reef", "A snowy forest",
              "A wheat field"],
    "closeup": ["Bricks", "Gravel", "Grass", "Sand", "Water", "Snow"],
    "heading": ["Region-based segmentation", "Edge detection", "Image denoising", "Color thresholding",
                "Feature matching"],
    "word": ["matplotlib", "numpy", "pandas", "scipy", "seaborn"],
}

_SUBJECT = "What is the main subject of this image?"

# Multiple-choice facts, each checked by eye. `exclude` removes pool options that could be argued
# true (something else visible in the picture, or a near-synonym of the answer).
_OBJECTS: list[dict[str, Any]] = [
    {"id": "chelsea_subject", "image": "chelsea", "question": _SUBJECT, "answer": "A cat",
     "pool": "subject", "category": "object"},
    {"id": "chelsea_animal", "image": "chelsea", "question": "What kind of animal is this?",
     "answer": "Cat", "pool": "animal", "category": "animal"},
    {"id": "horse_animal", "image": "horse", "question": "What animal is shown in this silhouette?",
     "answer": "Horse", "pool": "animal", "category": "animal"},
    {"id": "horse_color", "image": "horse", "question": "What color is the horse?", "answer": "Black",
     "pool": "color", "exclude": ["Gray", "Brown"], "category": "color"},
    {"id": "coffee_subject", "image": "coffee", "question": _SUBJECT, "answer": "A cup of coffee",
     "pool": "subject", "category": "object"},
    {"id": "coffee_utensil", "image": "coffee", "question": "What utensil is resting on the saucer?",
     "answer": "A spoon", "pool": "utensil", "category": "object"},
    {"id": "rocket_subject", "image": "rocket", "question": _SUBJECT, "answer": "A rocket",
     "pool": "subject", "category": "object"},
    {"id": "motorcycle_subject", "image": "motorcycle", "question": _SUBJECT, "answer": "A motorcycle",
     "pool": "subject", "exclude": ["A bicycle", "A chair"], "category": "object"},
    {"id": "motorcycle_color", "image": "motorcycle", "question": "What color is the motorcycle?",
     "answer": "Red", "pool": "color", "exclude": ["Black", "Orange", "Gray", "Pink", "Brown"],
     "category": "color"},
    {"id": "motorcycle_place", "image": "motorcycle", "question": "Where is the motorcycle parked?",
     "answer": "In a garage", "pool": "place", "category": "scene"},
    {"id": "flower_subject", "image": "flower", "question": _SUBJECT, "answer": "A flower",
     "pool": "subject", "category": "object"},
    {"id": "flower_color", "image": "flower", "question": "What color is the flower in the center?",
     "answer": "Orange", "pool": "color", "exclude": ["Red", "Yellow", "Pink", "White", "Brown"],
     "category": "color"},
    {"id": "present_subject", "image": "present", "question": _SUBJECT, "answer": "A gift box",
     "pool": "subject", "category": "object"},
    {"id": "present_color", "image": "present", "question": "What color is the box?", "answer": "Blue",
     "pool": "color", "exclude": ["White", "Gray", "Purple"], "category": "color"},
    {"id": "china_subject", "image": "china", "question": _SUBJECT, "answer": "A pagoda",
     "pool": "subject", "exclude": ["A boat"], "category": "object"},
    {"id": "china_distance", "image": "china",
     "question": "What can be seen in the distance behind the tower?", "answer": "A lake",
     "pool": "distance", "category": "scene"},
    {"id": "coins_objects", "image": "coins", "question": "What objects are shown in this image?",
     "answer": "Coins", "pool": "objects", "category": "object"},
    {"id": "coins_rows", "image": "coins", "question": "How many rows of coins are there in this image?",
     "answer": "4", "pool": "number", "exclude": ["6"], "category": "count"},
    {"id": "astronaut_person", "image": "astronaut", "question": "Who is shown in this image?",
     "answer": "An astronaut", "pool": "person", "category": "object"},
    {"id": "astronaut_suit_color", "image": "astronaut", "question": "What color is the spacesuit?",
     "answer": "Orange", "pool": "color",
     "exclude": ["Red", "Yellow", "White", "Black", "Gray", "Brown"], "category": "color"},
    {"id": "astronaut_flag", "image": "astronaut",
     "question": "Which country's flag is in the background?", "answer": "The United States",
     "pool": "flag", "category": "flag"},
    {"id": "grace_hopper_flag", "image": "grace_hopper",
     "question": "Which country's flag is in the background?", "answer": "The United States",
     "pool": "flag", "category": "flag"},
    {"id": "grace_hopper_eyewear", "image": "grace_hopper",
     "question": "What is the woman wearing over her eyes?", "answer": "Glasses", "pool": "eyewear",
     "category": "object"},
    {"id": "camera_device", "image": "camera", "question": "What device is mounted on the tripod?",
     "answer": "A camera", "pool": "device", "category": "object"},
    {"id": "chessboard_pattern", "image": "chessboard", "question": "What pattern is shown in this image?",
     "answer": "A checkerboard", "pool": "pattern", "category": "pattern"},
    {"id": "hubble_scene", "image": "hubble_deep_field", "question": "What does this image show?",
     "answer": "Galaxies in outer space", "pool": "scene", "category": "scene"},
    {"id": "brick_closeup", "image": "brick", "question": "What does this close-up photo show?",
     "answer": "Bricks", "pool": "closeup", "category": "texture"},
    {"id": "gravel_closeup", "image": "gravel", "question": "What does this close-up photo show?",
     "answer": "Gravel", "pool": "closeup", "exclude": ["Sand"], "category": "texture"},
    {"id": "grass_closeup", "image": "grass", "question": "What does this close-up photo show?",
     "answer": "Grass", "pool": "closeup", "category": "texture"},
    {"id": "page_heading", "image": "page", "question": "What is the heading at the top of the page?",
     "answer": "Region-based segmentation", "pool": "heading", "category": "text"},
    {"id": "logo_word", "image": "matplotlib_logo", "question": "What word is written in this image?",
     "answer": "matplotlib", "pool": "word", "category": "text"},
]

# POPE-style yes/no facts, each checked by eye (half "yes", half "no").
_YESNO: list[dict[str, str]] = [
    {"id": "chelsea_cat", "image": "chelsea", "question": "Is there a cat in this image?",
     "answer": "yes", "category": "existence"},
    {"id": "chelsea_dog", "image": "chelsea", "question": "Is there a dog in this image?",
     "answer": "no", "category": "existence"},
    {"id": "chelsea_bw", "image": "chelsea", "question": "Is this photo black and white?",
     "answer": "no", "category": "attribute"},
    {"id": "horse_horse", "image": "horse", "question": "Is there a horse in this image?",
     "answer": "yes", "category": "existence"},
    {"id": "horse_rider", "image": "horse", "question": "Is someone riding the horse?",
     "answer": "no", "category": "existence"},
    {"id": "coffee_spoon", "image": "coffee", "question": "Is there a spoon in this image?",
     "answer": "yes", "category": "existence"},
    {"id": "coffee_fork", "image": "coffee", "question": "Is there a fork in this image?",
     "answer": "no", "category": "existence"},
    {"id": "rocket_rocket", "image": "rocket", "question": "Is there a rocket in this image?",
     "answer": "yes", "category": "existence"},
    {"id": "rocket_horse", "image": "rocket", "question": "Is there a horse in this image?",
     "answer": "no", "category": "existence"},
    {"id": "motorcycle_motorcycle", "image": "motorcycle",
     "question": "Is there a motorcycle in this image?", "answer": "yes", "category": "existence"},
    {"id": "motorcycle_person", "image": "motorcycle", "question": "Is there a person in this image?",
     "answer": "no", "category": "existence"},
    {"id": "flower_flower", "image": "flower", "question": "Is there a flower in this image?",
     "answer": "yes", "category": "existence"},
    {"id": "flower_cat", "image": "flower", "question": "Is there a cat in this image?",
     "answer": "no", "category": "existence"},
    {"id": "present_ribbon", "image": "present", "question": "Is there a ribbon on the box?",
     "answer": "yes", "category": "existence"},
    {"id": "present_red", "image": "present", "question": "Is the box red?",
     "answer": "no", "category": "attribute"},
    {"id": "camera_tripod", "image": "camera", "question": "Is there a tripod in this image?",
     "answer": "yes", "category": "existence"},
    {"id": "camera_gloves", "image": "camera", "question": "Is the man wearing gloves?",
     "answer": "yes", "category": "attribute"},
    {"id": "camera_color", "image": "camera", "question": "Is this photo in color?",
     "answer": "no", "category": "attribute"},
    {"id": "astronaut_flag", "image": "astronaut", "question": "Is there a flag in this image?",
     "answer": "yes", "category": "existence"},
    {"id": "astronaut_helmet_on", "image": "astronaut",
     "question": "Is the astronaut wearing a helmet on her head?", "answer": "no", "category": "attribute"},
    {"id": "grace_hopper_glasses", "image": "grace_hopper", "question": "Is the woman wearing glasses?",
     "answer": "yes", "category": "attribute"},
    {"id": "grace_hopper_cat", "image": "grace_hopper", "question": "Is there a cat in this image?",
     "answer": "no", "category": "existence"},
    {"id": "china_water", "image": "china", "question": "Is there water in this image?",
     "answer": "yes", "category": "existence"},
    {"id": "china_airplane", "image": "china", "question": "Is there an airplane in the sky?",
     "answer": "no", "category": "existence"},
    {"id": "coins_coins", "image": "coins", "question": "Are there coins in this image?",
     "answer": "yes", "category": "existence"},
    {"id": "coins_banknote", "image": "coins", "question": "Is there a banknote in this image?",
     "answer": "no", "category": "existence"},
    {"id": "page_text", "image": "page", "question": "Is there text in this image?",
     "answer": "yes", "category": "existence"},
    {"id": "text_handwriting", "image": "text", "question": "Is there handwriting in this image?",
     "answer": "yes", "category": "existence"},
    {"id": "chessboard_checkerboard", "image": "chessboard",
     "question": "Is there a checkerboard pattern in this image?", "answer": "yes", "category": "existence"},
    {"id": "hubble_person", "image": "hubble_deep_field", "question": "Is there a person in this image?",
     "answer": "no", "category": "existence"},
    {"id": "brick_car", "image": "brick", "question": "Is there a car in this image?",
     "answer": "no", "category": "existence"},
    {"id": "gravel_dog", "image": "gravel", "question": "Is there a dog in this image?",
     "answer": "no", "category": "existence"},
]

# sklearn load_digits() indices and their labels, each looked at by eye at 128x128 and kept only when
# it reads as that digit at a glance. Candidates came from a seeded shuffle; rejected as unclear:
# 1: 1709, 336 (blob/bracket), 4: 450, 1791 (read as 9/6), 7: 1331 (reads as "?"), 8: 664 (open, reads as 6/B).
_DIGITS: list[tuple[int, int]] = [
    (1745, 0), (101, 0), (1591, 0), (422, 0),
    (1050, 1), (1590, 1), (349, 1),
    (1344, 2), (1594, 2), (1102, 2), (1403, 2),
    (561, 3), (385, 3), (1518, 3), (1498, 3),
    (171, 4), (225, 4), (1456, 4),
    (1448, 5), (289, 5), (1532, 5), (1129, 5),
    (1005, 6), (711, 6), (323, 6), (1521, 6),
    (393, 7), (1314, 7), (1373, 7), (1218, 7),
    (1423, 8), (404, 8), (296, 8),
    (128, 9), (1772, 9), (1686, 9), (1276, 9),
]

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
    letters = [LETTERS[i % 4] for i in range(len(_OBJECTS))]
    random.Random(f"{SEED}:letters").shuffle(letters)
    rows = []
    for fact, letter in zip(_OBJECTS, letters, strict=True):
        answer = fact["answer"]
        banned = {answer.casefold(), *(x.casefold() for x in fact.get("exclude", []))}
        pool = [x for x in _POOLS[fact["pool"]] if x.casefold() not in banned]
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
    return [{**fact, "image": _image_path(fact["image"])} for fact in _YESNO]


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
        for index, label in _DIGITS
    ]


def _images() -> dict[str, Image.Image]:
    """Every image the three files reference, by name."""
    used = {fact["image"] for fact in (*_OBJECTS, *_YESNO)}
    images = {name: _load_photo(*_IMAGES[name]) for name in sorted(used)}
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        raise FastmmevalError(
            "the demo data needs scikit-learn; install it with `pip install fastmmeval[demo]`"
        ) from exc
    digits = load_digits()
    for index, label in _DIGITS:
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
    h = hashlib.sha256(f"{SEED}|{MAX_SIDE}|{DIGIT_SCALE}|{DIGIT_MARGIN}|{sorted(_IMAGES.items())}".encode())
    for name in DATA_FILES:
        h.update(name.encode() + b"\0" + texts[name].encode() + b"\0")
    return h.hexdigest()


def _expected_files() -> list[str]:
    """Relative paths of every file a complete build holds."""
    names = {fact["image"] for fact in (*_OBJECTS, *_YESNO)}
    names |= {f"digit_{index:04d}" for index, _ in _DIGITS}
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
