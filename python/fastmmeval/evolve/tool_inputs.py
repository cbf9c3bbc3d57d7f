"""What an input of an evolve tool may be, as a solution plan writes it (text): a region of the image
(named, or a box in fractions), a colour or shape name, a number, a score, object labels or free text.
Each kind parses the text into what the tool gets, says in words what it takes (for the generator's
catalog and for errors), and finds a value of its kind in an earlier step's output (an "@k" input)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from PIL import Image

from fastmmeval.evolve import pixels


@dataclass(frozen=True)
class Region:
    """A part of the image: its name as a plan wrote it and its box (x0, y0, x1, y1) in fractions."""

    name: str
    box: tuple[float, float, float, float]

    def pixels(self, size: tuple[int, int]) -> tuple[int, int, int, int]:
        """The box in pixels of an image of `size` (x1, y1 exclusive, at least one pixel each way)."""
        w, h = size
        x0, y0 = min(round(self.box[0] * w), w - 1), min(round(self.box[1] * h), h - 1)
        return x0, y0, max(x0 + 1, round(self.box[2] * w)), max(y0 + 1, round(self.box[3] * h))

    def crop(self, image: Image.Image) -> Image.Image:
        """The part of `image` in this region."""
        return image if self.name == "whole" else image.crop(self.pixels(image.size))

    def holds(self, point: tuple[float, float], size: tuple[int, int]) -> bool:
        """Whether a point (pixels) of an image of `size` lies in this region."""
        x0, y0, x1, y1 = self.pixels(size)
        return x0 <= point[0] < x1 and y0 <= point[1] < y1

    def describe(self, size: tuple[int, int]) -> str:
        """How outputs name the region, with its pixels."""
        if self.name == "whole":
            return f"the whole image ({size[0]}x{size[1]} px)"
        x0, y0, x1, y1 = self.pixels(size)
        name = f"box {self.name}" if self.name[0].isdigit() else f"{self.name} region"
        return f"the {name} (x {x0}-{x1 - 1}, y {y0}-{y1 - 1} px)"


NAMED_REGIONS = {
    "whole": (0.0, 0.0, 1.0, 1.0), "left": (0.0, 0.0, 0.5, 1.0), "right": (0.5, 0.0, 1.0, 1.0),
    "top": (0.0, 0.0, 1.0, 0.5), "bottom": (0.0, 0.5, 1.0, 1.0), "center": (0.25, 0.25, 0.75, 0.75),
    "top-left": (0.0, 0.0, 0.5, 0.5), "top-right": (0.5, 0.0, 1.0, 0.5),
    "bottom-left": (0.0, 0.5, 0.5, 1.0), "bottom-right": (0.5, 0.5, 1.0, 1.0),
}
_REGION_ALIASES = {"centre": "center", "middle": "center", "all": "whole", "full": "whole", "image": "whole"}
WHOLE = Region("whole", NAMED_REGIONS["whole"])
CENTER = Region("center", NAMED_REGIONS["center"])
_BOX = re.compile(r"box (\d(?:\.\d+)?,\d(?:\.\d+)?,\d(?:\.\d+)?,\d(?:\.\d+)?)")


def parse_region(text: str) -> Region:
    """A named region (NAMED_REGIONS, any case, '-', '_' or ' ' between words) or a box "x0,y0,x1,y1"
    in fractions of the image."""
    name = re.sub(r"[\s_-]+", "-", text.strip().lower())
    name = _REGION_ALIASES.get(name, name)
    if name in NAMED_REGIONS:
        return Region(name, NAMED_REGIONS[name])
    parts = text.split(",")
    try:
        box = tuple(float(p) for p in parts)
    except ValueError:
        box = ()
    if len(box) != 4:
        raise ValueError(f"{text!r} is not a region ({KINDS['region'].help})")
    x0, y0, x1, y1 = box
    if not (0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1):
        raise ValueError(f"{text!r} is not a box inside the image: x0,y0,x1,y1 are fractions of its width and "
                         "height (0-1) with x0 < x1 and y0 < y1")
    return Region(",".join(f"{v:g}" for v in box), (x0, y0, x1, y1))


def _parse_name(text: str, names: tuple[str, ...], kind: str, aliases: Mapping[str, str]) -> str | None:
    name = text.strip().lower()
    name = aliases.get(name, name)
    if name == "any":
        return None
    if name not in names:
        raise ValueError(f"{text!r} is not a {kind} ({KINDS[kind].help})")
    return name


def _parse_int(text: str) -> int:
    if not re.fullmatch(r"\s*\d+\s*", text) or not 1 <= int(text) <= 20:
        raise ValueError(f"{text!r} is not a whole number from 1 to 20")
    return int(text)


def _parse_score(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise ValueError(f"{text!r} is not a score from 0 to 1")
    return value


def _parse_labels(text: str) -> tuple[str, ...]:
    labels = tuple(dict.fromkeys(label.strip().lower() for label in text.split(",") if label.strip()))
    if not 1 <= len(labels) <= 8:
        raise ValueError(f"{text!r} is not 1 to 8 object names separated by commas")
    return labels


def _parse_text(text: str) -> str:
    if not text.strip():
        raise ValueError("the text is empty")
    return text.strip()


def _first_word(names: Iterable[str]) -> Callable[[str], str | None]:
    pattern = re.compile(r"\b(" + "|".join(sorted(names, key=len, reverse=True)) + r")s?\b", re.IGNORECASE)
    return lambda text: (found.group(1) if (found := pattern.search(text)) else None)


@dataclass(frozen=True)
class Kind:
    """What an input's value may be: `help` says so (for the catalog and errors), `parse` turns the text
    into what the tool gets (raising ValueError with the reason), and `find` takes the first value of
    this kind from an earlier step's output (for an "@k" input; None: this kind is always written out)."""

    help: str
    parse: Callable[[str], Any]
    find: Callable[[str], str | None] | None


KINDS: dict[str, Kind] = {
    "text": Kind("free text", _parse_text, lambda text: text),
    "region": Kind("a named region: " + ", ".join(NAMED_REGIONS) + "; or a box x0,y0,x1,y1 in fractions of the "
                   "image (0-1), e.g. 0.1,0.5,0.4,0.9", parse_region,
                   lambda text: (found.group(1) if (found := _BOX.search(text)) else None)),
    "colour": Kind("a colour: " + ", ".join(pixels.COLOURS) + "; or any",
                   lambda text: _parse_name(text, pixels.COLOURS, "colour", pixels.ALIASES),
                   _first_word([*pixels.COLOURS, *pixels.ALIASES])),
    "shape": Kind("a shape: " + ", ".join(pixels.SHAPES) + "; or any",
                  lambda text: _parse_name(text, pixels.SHAPES, "shape", {}), _first_word(pixels.SHAPES)),
    "int": Kind("a whole number from 1 to 20", _parse_int,
                lambda text: (found.group(0) if (found := re.search(r"\b\d+\b", text)) else None)),
    "score": Kind("a score from 0 to 1, e.g. 0.2", _parse_score,
                  lambda text: (found.group(0) if (found := re.search(r"\b[01](?:\.\d+)?\b", text)) else None)),
    "labels": Kind("1 to 8 object names separated by commas, e.g. cat, dog", _parse_labels, None),
}


@dataclass(frozen=True)
class Param:
    """One input of a tool: its kind (a key of KINDS), what it is for, and whether a step must give it
    (else `default`, a text value of its kind, or None when the tool does without)."""

    kind: str
    description: str
    required: bool = False
    default: str | None = None

    def parse(self, text: str) -> Any:
        """The value the tool gets for `text` (ValueError with the reason when it is not of this kind)."""
        return KINDS[self.kind].parse(text)

    def show(self, name: str) -> str:
        """The input as the catalog lists it."""
        given = "required" if self.required else f"default {self.default}" if self.default else "optional"
        return f"{name} ({self.kind}, {given}): {self.description}"
