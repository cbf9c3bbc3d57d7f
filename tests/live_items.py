"""Finished LiveBench items built directly (no browser, no model): a screenshot PNG in the blob store, the
capture record it came from, and an item written from it with given scores."""

from __future__ import annotations

import io
import random

from PIL import Image, ImageDraw

from fastmmeval.live.records import SUBTASKS, Capture, Draft, Item, Score, Source
from fastmmeval.live.store import Blobs, content_key

NEWS = Source("Example News", "http://127.0.0.1:8123/news", "news", "en")


def screenshot(blobs: Blobs, headline: str, size: tuple[int, int] = (1024, 1024)) -> str:
    """A page-like PNG (a header bar, a picture block, the headline) stored in `blobs`; returns its sha256."""
    image = Image.new("RGB", size, (250, 250, 248))
    draw = ImageDraw.Draw(image)
    tint = int(content_key(headline)[:6], 16)
    draw.rectangle((0, 0, size[0], 80), fill=(20, 40, 90))
    draw.rectangle((40, 140, size[0] // 2, 520), fill=(tint >> 16, (tint >> 8) & 255, tint & 255))
    draw.text((40, 100), headline, fill=(0, 0, 0))
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return blobs.put(buf.getvalue(), ".png")


def capture(blobs: Blobs, source: Source = NEWS, headline: str = "Markets rally", screens: int = 1) -> Capture:
    """A successful capture of `source` with `screens` screenshots and its page text and HTML."""
    shas = [screenshot(blobs, f"{headline} ({k + 1})") for k in range(screens)]
    return Capture(
        source=source.record(),
        mode="single_screen" if screens == 1 else "rolling_screen",
        url=source.url,
        final_url=source.url,
        status=200,
        captured_at="2025-01-15 08:30:00",
        screens=shas,
        phash=["0" * 16] * screens,
        screen_size="1024x1024",
        text_sha=blobs.put(headline.encode(), ".txt"),
        html_sha=blobs.put(f"<h1>{headline}</h1>".encode(), ".html"),
    )


def item(
    page: Capture,
    index: int,
    subtask: str,
    question: str,
    scores: tuple[float, float, float] = (5, 3, 2),
    answer: str = "The headline says markets rallied.",
    criteria: str = "10 points for naming the rally; 0 otherwise.",
    reason: str = "Clear and grounded in the page.",
) -> Item:
    """A finished item written from `page`, scored (authenticity, coherence, clarity)."""
    draft = Draft(page.key, index, subtask, question, answer, criteria)
    score = Score(*scores, reason=reason)
    return Item(draft.record(), score.record(), page.record(), "gen-model", "check-model", "final-model", "score-model")


def question(seed: int, words: int = 14) -> str:
    """A question of distinct made-up words (two such share no word bigram, so are never near-duplicates)."""
    rng = random.Random(seed)
    return "What does the page say about " + " ".join(f"w{rng.randrange(10**9)}" for _ in range(words)) + "?"


def month_items(blobs: Blobs) -> list[Item]:
    """Nine items from two pages (one in Japanese with two screens), scored 10, 9.5 or 9, and one more that
    scores 3."""
    news = capture(blobs, headline="Markets rally")
    forum = capture(blobs, Source("掲示板", "http://127.0.0.1:8124/", "forum", "ja"), "今日の話題", screens=2)
    items = [item(news if k % 2 else forum, k, SUBTASKS[k % 4], question(k), scores=(5, 3, 2 - 0.5 * (k % 3)))
             for k in range(8)]  # fmt: skip
    return [*items, item(news, 8, SUBTASKS[0], question(8), scores=(1, 1, 1), reason="Not about the page.")]
