"""The extract stage: what is on a captured page, read by the extractor in three calls (its
visible text; its meaningful pictures and what they show; what is new on it), each building on
the one before."""

from __future__ import annotations

from typing import Any

from fastmmeval.live.ask import ask_and_read, page_values
from fastmmeval.live.records import Capture, Failure, PageInfo
from fastmmeval.live.roles import Role
from fastmmeval.live.store import Blobs, StageCache

STAGE = "extract"
# The HTML text shown beside the screenshots is capped: it only helps with spellings, and a long
# page's text (menus, hidden sections) would otherwise crowd out the screenshots in the context.
MAX_PAGE_TEXT_CHARS = 12_000


def extract_page(capture: Capture, role: Role, cache: StageCache, blobs: Blobs) -> PageInfo | Failure:
    """The page's text, pictures and news as the extractor `role` reads them off the capture's
    screenshots, or the Failure of the first call that fails."""
    if not capture.screens:
        return Failure(STAGE, capture.key, f"no screenshots to read (capture error: {capture.error or 'none'})")
    values = page_values(capture) | {"page_text": _page_text(capture, blobs)}
    text = ask_and_read(role, STAGE, "extract_text", values, capture, blobs, cache, capture.key,
                        lambda obj: obj["text"].strip())
    if isinstance(text, Failure):
        return text
    images = ask_and_read(role, STAGE, "extract_images", page_values(capture) | {"text": text}, capture, blobs,
                          cache, capture.key, _pictures)
    if isinstance(images, Failure):
        return images
    news = ask_and_read(role, STAGE, "extract_news", page_values(capture) | {"text": text, "images": images},
                        capture, blobs, cache, capture.key, _stories)
    if isinstance(news, Failure):
        return news
    return PageInfo(text, images, news)


def _page_text(capture: Capture, blobs: Blobs) -> str:
    if not capture.text_sha:
        return "(no text was captured)"
    text = blobs.get(capture.text_sha, ".txt").decode("utf-8", errors="replace").strip()
    return text[:MAX_PAGE_TEXT_CHARS] or "(the page has no text)"


def _pictures(obj: dict[str, Any]) -> str:
    lines = []
    for i, picture in enumerate(obj["images"], 1):
        goes_with = f" (goes with: {picture['relates_to']})" if picture.get("relates_to") else ""
        lines.append(f"{i}. {picture['where'] or 'On the page'}: {picture['shows']}{goes_with}")
    return "\n".join([*(lines or ["No meaningful pictures."]), f"The page: {obj['page']}"])


def _stories(obj: dict[str, Any]) -> str:
    lines = []
    for i, story in enumerate(obj["stories"], 1):
        follows = f" What follows: {story['implications']}" if story.get("implications") else ""
        lines.append(f"{i}. {story['story']}: {story['new']}{follows}")
    return "\n".join(lines)
