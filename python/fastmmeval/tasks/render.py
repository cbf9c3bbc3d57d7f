"""Turn a doc's fields into chat messages: text templates and image fields."""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Any

from PIL import Image

from fastmmeval.errors import DocError, FailureKind
from fastmmeval.extract.rules import LETTERS
from fastmmeval.images import DEFAULT_MAX_PIXELS, ImageRefused, confined_path, open_image, to_rgb, within_cap
from fastmmeval.protocol import ImagePart, Message, Part, TextPart
from fastmmeval.tasks.messages import InterleavedText, MessageTemplate


def format_options(options: list[str]) -> str:
    """'A. first\\nB. second...' for a prompt."""
    return "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options))


def render_text(template: str, fields: dict[str, Any], where: str) -> str:
    """Fill `{field}` slots from the doc's fields; a missing field is a DocError naming it."""
    out = []
    for literal, name, spec, conversion in string.Formatter().parse(template):
        out.append(literal)
        if name is None:
            continue
        if name not in fields:
            raise DocError(f"{where}: missing field {name!r} used by the prompt template", FailureKind.MISSING_FIELD)
        value = fields[name]
        if conversion:
            value = repr(value) if conversion == "r" else str(value)
        try:
            out.append(format(value, spec or ""))
        except (ValueError, TypeError) as e:  # a format spec the value's type does not take, e.g. {n:d} on text
            raise DocError(f"{where}: field {name!r} cannot be written as {{{name}:{spec}}}: {e}") from None
    return "".join(out)


def load_image(
    value: Any,
    image_root: Path | None,
    where: str,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    allow_absolute: bool = False,
) -> list[ImagePart]:
    """Decode an image field (PIL image, {'bytes','path'} dict, raw bytes, a path, or a list of these)
    into RGB images. A path is relative to `image_root` and may not leave it (an absolute one only with
    `allow_absolute`); an image over `max_pixels`, unreadable or refused is a DocError naming it."""
    if isinstance(value, (list, tuple)):
        if any(isinstance(v, (list, tuple)) for v in value):  # one level: a deep one would exhaust the stack
            raise DocError(f"{where}: image field holds a list of lists, not images")
        return [part for v in value for part in load_image(v, image_root, where, max_pixels, allow_absolute)]
    ref = ""
    try:
        if isinstance(value, Image.Image):
            image = within_cap(value, max_pixels)
        elif isinstance(value, dict) and value.get("bytes"):
            ref = str(value.get("path") or "<bytes>")
            image = open_image(_raw_bytes(value["bytes"]), max_pixels)
        elif isinstance(value, (bytes, bytearray)):
            ref = "<bytes>"
            image = open_image(value, max_pixels)
        elif isinstance(value, str) or (isinstance(value, dict) and isinstance(value.get("path"), str)):
            written = value if isinstance(value, str) else value["path"]
            ref = written if Path(written).is_absolute() or image_root is None else str(image_root / written)
            image = open_image(confined_path(written, image_root, allow_absolute), max_pixels)
        elif isinstance(value, dict):
            raise DocError(f"{where}: image field holds a mapping without image bytes or a path: {_short(value)}")
        else:
            raise DocError(f"{where}: image field holds {type(value).__name__}, not an image")
        return [ImagePart(to_rgb(image), ref)]
    except (ImageRefused, OSError, ValueError) as e:  # OSError, ValueError: a path the OS refuses to resolve
        reason = str(e) if isinstance(e, ImageRefused) else f"{type(e).__name__}: {e}"
        raise DocError(f"{where}: unreadable image {ref}: {reason}", FailureKind.UNREADABLE_IMAGE) from None


def _raw_bytes(value: Any) -> bytes:
    if not isinstance(value, (bytes, bytearray)):
        raise ImageRefused(f"its 'bytes' hold {type(value).__name__}, not bytes")
    return bytes(value)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def render_messages(
    templates: tuple[MessageTemplate, ...],
    fields: dict[str, Any],
    image_root: Path | None,
    where: str,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    allow_absolute: bool = False,
) -> tuple[Message, ...]:
    """The chat messages for one doc (images decoded under `max_pixels`, paths as `load_image` allows)."""
    messages = []
    for turn in templates:
        parts: list[Part] = []
        for kind, value in turn.parts:
            if isinstance(value, InterleavedText):
                parts.extend(render_interleaved(value, fields, image_root, where, max_pixels, allow_absolute))
            elif kind == "text":
                parts.append(TextPart(render_text(value, fields, where)))
            else:
                if value not in fields or fields[value] is None:
                    raise DocError(f"{where}: missing image field {value!r}", FailureKind.MISSING_IMAGE_FIELD)
                parts.extend(
                    load_image(fields[value], image_root, f"{where}, field {value!r}", max_pixels, allow_absolute)
                )
        messages.append(Message(turn.role, tuple(parts)))  # type: ignore[arg-type]
    return tuple(messages)


def render_interleaved(
    part: InterleavedText,
    fields: dict[str, Any],
    image_root: Path | None,
    where: str,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    allow_absolute: bool = False,
) -> list[Part]:
    """The part's rendered text cut at each placeholder, with the image it numbers in its place (the
    same image again where a placeholder repeats); each piece of text stripped, empty ones dropped.
    A placeholder naming no image of the list is a DocError naming it."""
    text = render_text(part.template, fields, where)
    images = fields.get(part.images)
    if not isinstance(images, (list, tuple)):
        raise DocError(f"{where}: field {part.images!r} holds no list of images", FailureKind.MISSING_IMAGE_FIELD)
    loaded: dict[int, list[ImagePart]] = {}
    out: list[Part] = []
    start = 0
    for match in re.finditer(part.pattern, text):
        out.append(TextPart(text[start : match.start()].strip()))
        start = match.end()
        number = match.group(1) or ""
        n = int(number) if number.isascii() and number.isdigit() else 0
        if not 1 <= n <= len(images) or images[n - 1] is None:
            raise DocError(
                f"{where}: the prompt shows {match.group(0)!r}, but field {part.images!r} holds no image {number}",
                FailureKind.MISSING_IMAGE_FIELD,
            )
        if n not in loaded:
            loaded[n] = load_image(images[n - 1], image_root, f"{where}, {match.group(0)}", max_pixels, allow_absolute)
        out.extend(loaded[n])
    out.append(TextPart(text[start:].strip()))
    return [p for p in out if not isinstance(p, TextPart) or p.text]
