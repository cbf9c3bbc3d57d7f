"""Turn a doc's fields into chat messages: text templates and image fields."""

from __future__ import annotations

import io
import string
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError

from fastmmeval.errors import DocError, FailureKind
from fastmmeval.extract.rules import LETTERS
from fastmmeval.protocol import ImagePart, Message, Part, TextPart
from fastmmeval.tasks.config import MessageTemplate


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
        out.append(format(value, spec or ""))
    return "".join(out)


def load_image(value: Any, image_root: Path | None, where: str) -> list[ImagePart]:
    """Decode an image field (PIL image, {'bytes','path'} dict, raw bytes, a path, or a list
    of these) into RGB images; an unreadable one is a DocError with the reason."""
    if isinstance(value, (list, tuple)):
        return [part for v in value for part in load_image(v, image_root, where)]
    ref = ""
    try:
        if isinstance(value, Image.Image):
            image = value
        elif isinstance(value, dict) and value.get("bytes"):
            ref = str(value.get("path") or "<bytes>")
            image = Image.open(io.BytesIO(value["bytes"]))
        elif isinstance(value, (bytes, bytearray)):
            ref = "<bytes>"
            image = Image.open(io.BytesIO(value))
        elif isinstance(value, (str, dict)):
            ref = value if isinstance(value, str) else str(value.get("path"))
            path = Path(ref)
            if not path.is_absolute() and image_root is not None:
                path = image_root / path
            ref = str(path)
            image = Image.open(path)
        else:
            raise DocError(f"{where}: image field holds {type(value).__name__}, not an image")
        image.load()
        return [ImagePart(image.convert("RGB"), ref)]
    except (OSError, UnidentifiedImageError, ValueError) as e:
        raise DocError(
            f"{where}: unreadable image {ref or ''}: {type(e).__name__}: {e}", FailureKind.UNREADABLE_IMAGE
        ) from None


def render_messages(
    templates: tuple[MessageTemplate, ...], fields: dict[str, Any], image_root: Path | None, where: str
) -> tuple[Message, ...]:
    """The chat messages for one doc."""
    messages = []
    for turn in templates:
        parts: list[Part] = []
        for kind, value in turn.parts:
            if kind == "text":
                parts.append(TextPart(render_text(value, fields, where)))
            else:
                if value not in fields or fields[value] is None:
                    raise DocError(f"{where}: missing image field {value!r}", FailureKind.MISSING_IMAGE_FIELD)
                parts.extend(load_image(fields[value], image_root, f"{where}, field {value!r}"))
        messages.append(Message(turn.role, tuple(parts)))  # type: ignore[arg-type]
    return tuple(messages)
