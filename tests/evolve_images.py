"""Annotated drawn images for the evolve tests: flat shapes of known colours at known places, and a
printed word, so that what a tool reads off an image (OCR, colours, counts, positions) can be checked
against the truth, and a question's right answer is known.

    scene = drawn_scene(3)
    scene.image              # a 320x240 RGB picture
    scene.counts["red"]      # how many red shapes it holds
    scene.word               # the printed word (upper case)
    write_folder(tmp_path / "images", 12)   # PNGs + manifest.jsonl with title/context/uploaded_at
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

SIZE = (320, 240)
COLOURS = {"red": (220, 30, 30), "green": (30, 170, 60), "blue": (30, 70, 220), "yellow": (235, 200, 20)}
SHAPES = ("circle", "square", "triangle")
WORDS = ("HARBOUR", "MUSEUM", "RAILWAY", "GLACIER", "BAKERY", "STADIUM", "LIBRARY", "VOLCANO", "BRIDGE",
         "THEATRE", "CANAL", "OPERA", "TUNNEL", "FERRY", "LAGOON", "SUBWAY")  # fmt: skip
# Cells of a 4x2 grid in the picture's lower 180 px (the word is printed above them).
_CELL_W, _CELL_H, _TOP = 80, 90, 60


@dataclass
class Shape:
    """One drawn shape: kind, colour name, its box (x0, y0, x1, y1) in pixels and its horizontal half."""

    kind: str
    colour: str
    box: tuple[int, int, int, int]

    @property
    def side(self) -> str:
        """'left' or 'right': which half of the picture its centre is in."""
        return "left" if (self.box[0] + self.box[2]) / 2 < SIZE[0] / 2 else "right"


@dataclass
class Scene:
    """A drawn picture and what is in it."""

    image: Image.Image
    word: str
    shapes: list[Shape]
    background: tuple[int, int, int]
    counts: Counter[str] = field(default_factory=Counter)

    def annotation(self) -> dict[str, Any]:
        """The truth as JSON: word, counts per colour and per kind, and every shape."""
        return {"word": self.word, "counts": dict(self.counts),
                "kinds": dict(Counter(s.kind for s in self.shapes)),
                "shapes": [{"kind": s.kind, "colour": s.colour, "box": list(s.box), "side": s.side}
                           for s in self.shapes]}  # fmt: skip


def drawn_scene(i: int) -> Scene:
    """Scene `i` (the same picture for the same i): two to five shapes in distinct grid cells, each of
    a named colour, on a light background, under a printed word."""
    rng = random.Random(i)
    background = (245, 245, 240) if i % 2 == 0 else (235, 240, 250)
    image = Image.new("RGB", SIZE, background)
    draw = ImageDraw.Draw(image)
    word = WORDS[i % len(WORDS)]
    draw.text((16, 8), word, fill=(20, 20, 20), font=ImageFont.load_default(size=40))
    shapes = []
    for cell in rng.sample(range(8), rng.randint(2, 5)):
        col, row = cell % 4, cell // 4
        x0, y0 = col * _CELL_W + 12, _TOP + row * _CELL_H + 12
        box = (x0, y0, x0 + _CELL_W - 24, y0 + _CELL_H - 34)
        kind, colour = rng.choice(SHAPES), rng.choice(sorted(COLOURS))
        fill = COLOURS[colour]
        if kind == "circle":
            draw.ellipse(box, fill=fill)
        elif kind == "square":
            draw.rectangle(box, fill=fill)
        else:
            draw.polygon([(box[0], box[3]), ((box[0] + box[2]) // 2, box[1]), (box[2], box[3])], fill=fill)
        shapes.append(Shape(kind, colour, box))
    return Scene(image, word, shapes, background, Counter(s.colour for s in shapes))


def write_folder(root: Path, n: int, start: int = 0, topics: Sequence[str] = ()) -> list[Scene]:
    """Scenes start..start+n-1 as PNGs in `root` with a `manifest.jsonl` (file, title, context,
    uploaded_at, and the truth under `annotation`); returns the scenes. With `topics`, scene i's title
    also names topics[i % len(topics)] (so a query naming a topic ranks its scenes first)."""
    root.mkdir(parents=True, exist_ok=True)
    scenes, lines = [], []
    for i in range(start, start + n):
        scene = drawn_scene(i)
        name = f"scene_{i:03d}.png"
        scene.image.save(root / name)
        colours = ", ".join(f"{k} {c}" for c, k in sorted(scene.counts.items()))
        topic = f" about {topics[i % len(topics)]}" if topics else ""
        lines.append({"file": name, "title": f"Sign {scene.word.title()} with shapes{topic}",
                      "context": f"A sign reading {scene.word} above {colours} shapes.",
                      "uploaded_at": f"2026-{1 + i % 11:02d}-15T12:00:00Z", "annotation": scene.annotation()})
        scenes.append(scene)
    text = "".join(json.dumps(line, sort_keys=True) + "\n" for line in lines)
    (root / "manifest.jsonl").write_text(text, encoding="utf-8")
    return scenes
