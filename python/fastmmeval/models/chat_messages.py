"""Requests as OpenAI-style chat conversations, images as lossless PNG data URLs: what vLLM's
`LLM.chat` and OpenAI-compatible servers take."""

from __future__ import annotations

import base64
import io
from typing import Any

from PIL import Image

from fastmmeval.models.image_memo import ImageMemo
from fastmmeval.protocol import ImagePart, Request, TextPart

# Image modes PNG stores as they are; any other mode is sent as RGB.
_PNG_MODES = {"1", "L", "LA", "P", "RGB", "RGBA", "I", "I;16"}
_URLS: ImageMemo[str] = ImageMemo()


def image_data_url(image: Image.Image) -> str:
    """`image` as a `data:image/png;base64,...` URL (lossless); encoded once per image object."""
    return _URLS.get(image, "png", lambda: _png_url(image))


def _png_url(image: Image.Image) -> str:
    if image.mode not in _PNG_MODES:
        image = image.convert("RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def to_vllm_chat(request: Request) -> list[dict[str, Any]]:
    """The request's messages as one OpenAI-style conversation for `LLM.chat`.

    A message without images has its text as a plain string; a message with images has a list of
    content parts in order: `{"type": "text", "text": ...}` (adjacent text parts joined, empty ones
    dropped) and `{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}`.
    """
    chat: list[dict[str, Any]] = []
    for message in request.messages:
        if not message.images:
            chat.append({"role": message.role, "content": message.text})
            continue
        parts: list[dict[str, Any]] = []
        for part in message.content:
            if isinstance(part, ImagePart):
                parts.append({"type": "image_url", "image_url": {"url": image_data_url(part.image)}})
            elif isinstance(part, TextPart) and part.text:
                if parts and parts[-1]["type"] == "text":
                    parts[-1] = {"type": "text", "text": parts[-1]["text"] + part.text}
                else:
                    parts.append({"type": "text", "text": part.text})
        chat.append({"role": message.role, "content": parts})
    return chat
