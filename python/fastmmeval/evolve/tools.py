"""The allowlisted tools a solution plan's steps may name (MMBench-Live's executable verification).

A tool reads the image (and, through "@k" inputs, earlier steps' text outputs) and returns short plain
text that a vision-blind verifier can reason over. Nothing a model wrote is ever run: a plan only
names these tools and gives them text inputs, each checked against the tool's `Param`s.

    tools = default_tools()                       # ocr, tags, region_colour, count, locate, image_info
    tools = default_tools({"detect": Path("owlv2"), "depth": Path("depth-anything-v2-small")})
    print(tools.catalog())                        # what a generator is shown
    tools.get("count").run(image, {"colour": "red", "shape": None, "region": parse_region("whole")}, [])
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np
from PIL import Image

from fastmmeval.errors import ConfigError
from fastmmeval.evolve import pixels
from fastmmeval.evolve.tool_inputs import CENTER, KINDS, Param, Region

T = TypeVar("T")
RunFn = Callable[[Image.Image, dict[str, Any], list[str]], str]


@dataclass(frozen=True)
class Tool:
    """A registered tool: `run(image, args, earlier)` gets the step's parsed inputs (every param, absent
    ones at their default) and the text outputs of the steps before it, and returns text. `version`
    changes whenever its output can change; `model` is the fingerprint of the weights it uses."""

    name: str
    description: str
    returns: str
    params: Mapping[str, Param]
    run: RunFn
    version: int = 1
    model: Callable[[], dict[str, Any]] | None = field(default=None, compare=False)

    def show(self) -> str:
        """The tool as the generator's catalog lists it."""
        lines = [f"- {self.name}: {self.description} Returns {self.returns}"]
        lines += [f"    {param.show(name)}" for name, param in self.params.items()] or ["    (no inputs)"]
        return "\n".join(lines)


class ToolBox:
    """The tools a run may use, by name; `unavailable` names the known tools that are not registered
    and why (e.g. what weights they need)."""

    def __init__(self, tools: Iterable[Tool], unavailable: Mapping[str, str] | None = None) -> None:
        self._tools = {tool.name: tool for tool in tools}
        self.names: tuple[str, ...] = tuple(self._tools)
        self.unavailable = dict(unavailable or {})

    def get(self, name: str) -> Tool:
        """The registered tool `name` (a ConfigError saying why not, when it is not)."""
        if name not in self._tools:
            raise ConfigError(self.why_not(name))
        return self._tools[name]

    def why_not(self, name: str) -> str:
        """Why a plan cannot name `name`."""
        if name in self.unavailable:
            return f"tool {name!r} is not registered: {self.unavailable[name]}"
        return f"tool {name!r} is not registered (known: {', '.join(self.names)})"

    def catalog(self) -> str:
        """Every tool, its inputs and what it returns, as a generator's prompt shows them, then what each kind
        of input takes."""
        kinds = dict.fromkeys(p.kind for tool in self._tools.values() for p in tool.params.values())
        return "\n".join([tool.show() for tool in self._tools.values()] + ["Input values (all written as text):"]
                         + [f"- {kind}: {KINDS[kind].help}" for kind in kinds] + [REFERENCES])

    def fingerprint(self) -> dict[str, Any]:
        """Every tool's name and version and the weights it uses (loads the models that are not yet)."""
        return {"tools": {tool.name: {"version": tool.version, **({"model": tool.model()} if tool.model else {})}
                          for tool in self._tools.values()}}


REFERENCES = ('An input value "@k" is the output of the earlier step k (1-based): a region takes the first '
              '"box x0,y0,x1,y1" in it, a colour or a shape the first one named in it, a number the first number, '
              'text the whole output; labels are always written out.')


class Lazy(Generic[T]):
    """A value made by `factory` on first use, once, whichever thread asks first."""

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory, self._value, self._lock = factory, None, threading.Lock()

    def __call__(self) -> T:
        with self._lock:
            if self._value is None:
                self._value = self._factory()
            return self._value


def _region_param(required: bool = False) -> Param:
    return Param("region", "the part of the image to look at", required, None if required else "whole")


def ocr_tool(reader: Lazy[Any]) -> Tool:
    def run(image: Image.Image, args: dict[str, Any], earlier: list[str]) -> str:
        region: Region = args["region"]
        where = region.describe(image.size)
        lines = reader().read(region.crop(image))
        if not lines:
            return f"no text read in {where}"
        read = "; ".join(f'"{text}" (confidence {score:.2f})' for text, score in lines)
        return f"{len(lines)} text line(s) read in {where}, in reading order: {read}"

    return Tool("ocr", "Reads the printed or written text (RapidOCR).",
                "the text lines in reading order (top to bottom, left to right), each with its confidence.",
                {"region": _region_param()}, run, model=lambda: reader().fingerprint())


def tags_tool(tagger: Lazy[Any]) -> Tool:
    def run(image: Image.Image, args: dict[str, Any], earlier: list[str]) -> str:
        region: Region = args["region"]
        [tags] = tagger().tags([region.crop(image)], k=args["k"])
        listed = ", ".join(f"{name} {p:.2f}" for name, p in tags)
        return f"top {len(tags)} ImageNet labels for {region.describe(image.size)}: {listed}"

    return Tool("tags", "Names what the picture shows as ImageNet classes (EfficientNet-Lite0).",
                "the k most likely ImageNet labels with their probabilities.",
                {"region": _region_param(), "k": Param("int", "how many labels", default="5")}, run,
                model=lambda: tagger().fingerprint())


def _brightness_word(value: float) -> str:
    return "dark" if value < 0.35 else "medium" if value < 0.65 else "light"


def _shares(shares: list[tuple[str, float]], least: float = 0.05, most: int = 3) -> str:
    return ", ".join(f"{name} {share:.0%}" for name, share in shares[:most] if share >= least)


def _region_colour(image: Image.Image, args: dict[str, Any], earlier: list[str]) -> str:
    region: Region = args["region"]
    rgb = np.asarray(image)
    behind = pixels.background(pixels.colour_index(pixels.shrink(rgb)[0]))
    x0, y0, x1, y1 = region.pixels(image.size)
    part = pixels.shrink(rgb[y0:y1, x0:x1])[0]
    index = pixels.colour_index(part)
    where, light = region.describe(image.size), pixels.brightness(part)
    tone = f"mean brightness {light:.2f} ({_brightness_word(light)})"
    fore = index[index != pixels.COLOURS.index(behind)] if behind else index.ravel()
    if fore.size == 0:
        return f"{behind} (the background) is the only colour in {where}; {tone}"
    shares = pixels.colour_shares(fore)
    top, share = shares[0]
    rest = _shares(shares[1:])
    cover = f"; they cover {fore.size / index.size:.0%} of it (background {behind})" if behind else ""
    return (f"{top} is the dominant colour of the {'non-background ' if behind else ''}pixels in {where} "
            f"({share:.0%}{'; then ' + rest if rest else ''}){cover}; {tone}")


def _objects(image: Image.Image, args: dict[str, Any]) -> tuple[list[pixels.Blob], str]:
    region: Region = args["region"]
    blobs = [b for b in pixels.find_blobs(np.asarray(image)) if region.holds(b.centre, image.size)
             and args["colour"] in (None, b.colour) and args["shape"] in (None, b.shape)]
    return blobs, region.describe(image.size)


def _noun(colour: str | None, shape: str | None, n: int) -> str:
    noun = "other-shaped object" if shape == "other" else shape or "object"
    return " ".join(filter(None, (colour, noun + ("s" if n != 1 else ""))))


def _count(image: Image.Image, args: dict[str, Any], earlier: list[str]) -> str:
    blobs, where = _objects(image, args)
    text = f"{len(blobs)} {_noun(args['colour'], args['shape'], len(blobs))} in {where}"
    split = [(what, Counter(getattr(b, what) for b in blobs)) for what in ("colour", "shape") if args[what] is None]
    parts = [f"by {what}: " + ", ".join(f"{k} {n}" for k, n in counts.most_common()) for what, counts in split
             if counts]
    return "; ".join([text, *parts])


def position(centre: tuple[float, float], size: tuple[int, int]) -> str:
    """Where a point (pixels) lies: its quarter of the image (top or bottom half, left or right half),
    and whether it is in the center region."""
    x, y = centre
    place = f"{'top' if y < size[1] / 2 else 'bottom'}-{'left' if x < size[0] / 2 else 'right'}"
    return place + (", near the center" if CENTER.holds(centre, size) else "")


def box_text(box: tuple[int, int, int, int], size: tuple[int, int]) -> str:
    """A pixel box (x1, y1 exclusive) as outputs write it: in fractions (what a region input takes) and
    in pixels."""
    w, h = size
    return (f"box {box[0] / w:.3f},{box[1] / h:.3f},{box[2] / w:.3f},{box[3] / h:.3f}; "
            f"x {box[0]}-{box[2] - 1}, y {box[1]}-{box[3] - 1} px")


def _locate(image: Image.Image, args: dict[str, Any], earlier: list[str]) -> str:
    blobs, where = _objects(image, args)
    noun = _noun(args["colour"], args["shape"], len(blobs))
    if not blobs:
        return f"0 {noun} in {where}"
    listed = [f"{i}. {b.colour} {b.shape} at {position(b.centre, image.size)} ({box_text(b.box, image.size)})"
              for i, b in enumerate(blobs, 1)]
    return f"{len(blobs)} {noun} in {where}, left to right: " + "; ".join(listed)


def _image_info(image: Image.Image, args: dict[str, Any], earlier: list[str]) -> str:
    w, h = image.size
    rgb, scale = pixels.shrink(np.asarray(image))
    index = pixels.colour_index(rgb)
    behind, light = pixels.background(index), pixels.brightness(rgb)
    shape = "landscape" if w > h * 1.05 else "portrait" if h > w * 1.05 else "square"
    text = (f"{w}x{h} px, aspect {w / h:.2f} ({shape}); mean brightness {light:.2f} ({_brightness_word(light)}); "
            f"colours: {_shares(pixels.colour_shares(index), least=0.02, most=5)}")
    if behind is None:
        return text + "; no uniform background"
    fore = index != pixels.COLOURS.index(behind)
    if not fore.any():
        return text + f"; only the {behind} background"
    ys, xs = np.nonzero(fore)
    left, top = float((xs * scale < w / 2).mean()), float((ys * scale < h / 2).mean())
    return (text + f"; background {behind}; {fore.mean():.0%} of the image is not background, of which "
            f"{top:.0%} in the top half and {left:.0%} in the left half")


_FILTERS = {"colour": Param("colour", "only objects of this colour", default="any"),
            "shape": Param("shape", "only objects of this shape", default="any"),
            "region": Param("region", "only objects whose centre is in this part of the image", default="whole")}
_OBJECTS = ("Objects are solid regions of one named colour other than the background (at least 0.4% of the "
            "image); squares have sides within 10% of each other, other four-sided boxes are rectangles.")
PIXEL_TOOLS = (
    Tool("region_colour", "Names the main colour of a part of the image from its pixels (background left out).",
         "the dominant colour name with its share, the next colours, and the mean brightness.",
         {"region": _region_param(required=True)}, _region_colour),
    Tool("count", "Counts the objects, optionally of one colour and/or shape. " + _OBJECTS,
         "how many there are, with the split by colour and by shape.", _FILTERS, _count),
    Tool("locate", "Lists each object with its colour, shape, box and position. " + _OBJECTS,
         "the objects from left to right, each with colour, shape, position (top/bottom, left/right half) and its "
         "box (fractions x0,y0,x1,y1 and pixels).", _FILTERS, _locate),
    Tool("image_info", "Describes the picture as a whole.",
         "size, aspect and orientation, mean brightness, main colours, background and where the content lies.",
         {}, _image_info),
)
