"""Pixel statistics behind the evolve tools that need no model: a fixed palette of named colours
(each pixel named by its hue, saturation and value), the background (the colour most of the
border has), and the objects of an image (connected regions of one named colour, OpenCV contours,
shape from polygon approximation)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

# The palette, in the order counts are listed; every pixel gets exactly one of these names.
COLOURS = ("red", "orange", "yellow", "green", "cyan", "blue", "purple", "pink", "brown", "black", "white", "gray")
ALIASES = {"grey": "gray", "violet": "purple", "magenta": "pink", "teal": "cyan"}
SHAPES = ("circle", "ellipse", "square", "rectangle", "triangle", "other")
# Hue bands (degrees, upper bound exclusive) of the chromatic colours; red wraps around 360.
_HUES = ((15, "red"), (45, "orange"), (70, "yellow"), (160, "green"), (200, "cyan"), (260, "blue"), (290, "purple"),
         (340, "pink"), (361, "red"))
_BLACK_VALUE = 0.22  # below this value a pixel is black whatever its hue
_GRAY_SATURATION = 0.18  # below this saturation a pixel is white, gray or black
_WHITE_VALUE = 0.8
_BACKGROUND_SHARE = 0.5  # the border's commonest colour is the background when it holds this much of it
_AT = {name: i for i, name in enumerate(COLOURS)}
MIN_OBJECT_SHARE = 0.004  # an object covers at least this share of the image...
_MIN_SOLIDITY = 0.8  # ...and fills this much of its convex hull (letters and thin strokes do not)
MAX_SIDE = 1024  # larger images are analysed shrunk to this longer side (colour shares barely move)


def colour_index(rgb: np.ndarray) -> np.ndarray:
    """The palette index (into COLOURS) of every pixel of an (h, w, 3) uint8 RGB array."""
    hsv = cv2.cvtColor(np.ascontiguousarray(rgb, dtype=np.uint8), cv2.COLOR_RGB2HSV_FULL).astype(np.float32)
    hue, sat, val = hsv[..., 0] * (360 / 256), hsv[..., 1] / 255, hsv[..., 2] / 255
    band_colour = np.asarray([_AT[name] for _, name in _HUES], dtype=np.int8)
    index = band_colour[np.minimum(np.digitize(hue, [upper for upper, _ in _HUES]), len(_HUES) - 1)]
    index[(index == _AT["red"]) & (sat < 0.5) & (val > 0.75)] = _AT["pink"]
    index[(index == _AT["orange"]) & (val < 0.6)] = _AT["brown"]
    index[(index == _AT["pink"]) & (val < 0.6)] = _AT["purple"]
    grey = sat < _GRAY_SATURATION
    index[grey] = np.where(val[grey] > _WHITE_VALUE, _AT["white"], _AT["gray"])
    index[val < _BLACK_VALUE] = _AT["black"]
    return index


def shrink(rgb: np.ndarray) -> tuple[np.ndarray, float]:
    """`rgb` shrunk (area averaging) to at most MAX_SIDE pixels on its longer side, and the factor that
    takes its coordinates back to the original's."""
    longer = max(rgb.shape[:2])
    if longer <= MAX_SIDE:
        return rgb, 1.0
    scale = MAX_SIDE / longer
    size = (max(1, round(rgb.shape[1] * scale)), max(1, round(rgb.shape[0] * scale)))
    small = cv2.resize(np.ascontiguousarray(rgb), size, interpolation=cv2.INTER_AREA)
    return small, rgb.shape[1] / size[0]


def colour_shares(index: np.ndarray) -> list[tuple[str, float]]:
    """The palette colours present in an index array with their share of its pixels, largest first."""
    counts = np.bincount(index.ravel(), minlength=len(COLOURS))
    total = max(int(counts.sum()), 1)
    return sorted(((COLOURS[i], n / total) for i, n in enumerate(counts.tolist()) if n), key=lambda c: -c[1])


def background(index: np.ndarray) -> str | None:
    """The colour most of the image's border has, when it holds at least half of it; else None."""
    border = np.concatenate([index[0], index[-1], index[1:-1, 0], index[1:-1, -1]])
    name, share = colour_shares(border)[0]
    return name if share >= _BACKGROUND_SHARE else None


def brightness(rgb: np.ndarray) -> float:
    """Mean luma (ITU-R BT.601) of an RGB array, in [0, 1]."""
    if rgb.size == 0:
        return 0.0
    return float((rgb[..., :3].astype(np.float32) @ np.asarray([0.299, 0.587, 0.114], np.float32)).mean() / 255)


@dataclass(frozen=True)
class Blob:
    """One object found in an image: its colour, shape and box (x0, y0, x1, y1) in pixels, x1 and y1
    exclusive, and how many pixels it has."""

    colour: str
    shape: str
    box: tuple[int, int, int, int]
    area: int

    @property
    def centre(self) -> tuple[float, float]:
        """The box's centre in pixels."""
        return (self.box[0] + self.box[2]) / 2, (self.box[1] + self.box[3]) / 2


def find_blobs(rgb: np.ndarray) -> list[Blob]:
    """The image's objects, left to right: connected regions of one named colour other than the
    background, covering at least MIN_OBJECT_SHARE of the image and filling most of their convex hull
    (found in the image shrunk to MAX_SIDE; boxes and areas are the original's)."""
    small, scale = shrink(rgb)
    index = colour_index(small)
    behind = background(index)
    min_area = max(16, int(MIN_OBJECT_SHARE * index.size))
    kernel = np.ones((3, 3), np.uint8)
    blobs = []
    for i, name in enumerate(COLOURS):
        if name == behind:
            continue
        mask = cv2.morphologyEx((index == i).astype(np.uint8), cv2.MORPH_OPEN, kernel)
        count, labels, stats, _ = cv2.connectedComponentsWithStats(mask, connectivity=8)
        for label in range(1, count):
            x, y, w, h, area = (int(v) for v in stats[label])
            if area < min_area:
                continue
            piece = (labels[y:y + h, x:x + w] == label).astype(np.uint8)
            contours, _ = cv2.findContours(piece, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
            outline = max(contours, key=cv2.contourArea)
            hull = cv2.contourArea(cv2.convexHull(outline))
            if hull <= 0 or area / hull < _MIN_SOLIDITY:
                continue
            box = (round(x * scale), round(y * scale), round((x + w) * scale), round((y + h) * scale))
            blobs.append(Blob(name, shape_of(outline, area, w, h), box, round(area * scale * scale)))
    return sorted(blobs, key=lambda b: (b.centre[0], b.centre[1]))


def shape_of(outline: np.ndarray, area: int, width: int, height: int) -> str:
    """The shape (one of SHAPES) of a solid region from its outer contour: a triangle or a four-sided
    box (square when its sides differ by at most 10%) by polygon approximation, else a circle or an
    ellipse by roundness, else 'other'."""
    perimeter = cv2.arcLength(outline, True)
    corners = len(cv2.approxPolyDP(outline, 0.04 * perimeter, True))
    aspect = width / max(height, 1)
    if corners == 3:
        return "triangle"
    if corners == 4 and area >= 0.85 * width * height:
        return "square" if 0.9 <= aspect <= 1 / 0.9 else "rectangle"
    roundness = 4 * math.pi * area / max(perimeter, 1) ** 2
    if corners > 4 and roundness >= 0.75:
        return "circle" if 0.9 <= aspect <= 1 / 0.9 else "ellipse"
    return "other"
