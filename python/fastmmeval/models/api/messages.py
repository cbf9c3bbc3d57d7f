"""Requests as the chat messages the API backends send: a system turn, images shrunk."""

from __future__ import annotations

from typing import Any

from PIL import Image

from fastmmeval.models.chat_messages import to_vllm_chat
from fastmmeval.models.image_memo import ImageMemo
from fastmmeval.protocol import ImagePart, Message, Request

_SHRUNK: ImageMemo[Image.Image] = ImageMemo()


def shrink(image: Image.Image, max_side: int) -> Image.Image:
    """`image` scaled down (aspect kept) so its longer side is at most `max_side` (0: unchanged); one
    shrunk copy per image object and size, so its data URL is encoded once too."""
    if max_side <= 0 or max(image.size) <= max_side:
        return image
    scale = max_side / max(image.size)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    return _SHRUNK.get(image, max_side, lambda: image.resize(size, Image.LANCZOS))


def openai_messages(request: Request, system: str, max_image_side: int) -> list[dict[str, Any]]:
    """The request as OpenAI chat messages: `system` (if any) first, images shrunk to
    `max_image_side` as PNG data URLs in `image_url` parts."""
    messages = tuple(
        Message(m.role, tuple(ImagePart(shrink(p.image, max_image_side), p.ref) if isinstance(p, ImagePart) else p
                              for p in m.content))
        for m in request.messages
    )
    chat = to_vllm_chat(Request(request.id, request.kind, messages))
    return ([{"role": "system", "content": system}] if system else []) + chat
