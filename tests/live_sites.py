"""Fixture websites for the live pipeline's tests, served on 127.0.0.1: an English news page with
images and headlines, a Japanese and a Chinese page, a page that never settles (it long-polls for
ever), a 404, a redirect to a host off the allowlist (`localhost`, the same server under another
name), a long page and a brief one (a headline and a line, for tests that run a real model on it);
with `editions=N`, N more news pages (`/edition/<i>`, each with its own headlines, for benches).
Content is fixed, so two captures of a page look the same. The server answers at most
`max_requests` requests and lives at most `lifetime_s` seconds.

    with serve_sites() as (base_url, sources):
        captures = capture_pages(sources, ...)
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from fixture_http import FixtureServer, Reply
from PIL import Image, ImageDraw

from fastmmeval.live.records import Source

HEADLINE = "Harbour bridge reopens after three weeks of storm repairs"
JAPANESE = "東京で桜の開花が観測史上最も早く発表されました"
CHINESE = "长江流域迎来丰收季节，农民喜获高产"
# The pages, by path: their source name, language and category.
PAGES = {
    "/news": ("news-en", "en", "news"),
    "/ja": ("news-ja", "ja", "news"),
    "/zh": ("news-zh", "zh", "news"),
    "/restless": ("restless", "en", "forum"),
    "/missing": ("missing", "en", "news"),
    "/offsite": ("offsite", "en", "news"),
    "/long": ("long", "en", "news"),
    "/brief": ("brief", "en", "news"),
}
LONG_PAGE_PX = 5200
POLL_S = 0.3


def _page(lang: str, title: str, body: str, style: str = "") -> bytes:
    head = f"<meta charset='utf-8'><title>{title}</title><style>body{{margin:0;font:18px sans-serif}}{style}</style>"
    return f"<!doctype html><html lang='{lang}'><head>{head}</head><body>{body}</body></html>".encode()


STORIES = ("Tram fares fall for students", "City orchestra opens its winter season", "Rain delays the final test match")


def _news(base: str, beacon: str, headline: str = HEADLINE, stories: tuple[str, ...] = STORIES) -> bytes:
    articles = "".join(
        f"<article><img src='{base}/img/{i}.png' width='300' height='200'><h2>{h}</h2></article>"
        for i, h in enumerate(stories)
    )
    return _page(
        "en", "Daily Harbour",
        f"<header>Daily Harbour</header><h1>{headline}</h1><main>{articles}</main>"
        f"<img src='{beacon}/beacon.png' width='1' height='1'>",
        "header{background:#123a7a;color:#fff;font-size:40px;padding:30px}h1{margin:30px}"
        "main{display:flex;gap:20px;padding:20px}article{width:310px}",
    )


def _edition(base: str, i: int) -> bytes:
    """News page number `i`: the news page with headlines of its own."""
    topics = ("ferry", "library", "market", "stadium", "museum", "airport", "harbour", "school")
    stories = tuple(f"{topics[(i + k) % len(topics)].title()} news {i}.{k}: plans change for the {topics[k]}"
                    for k in range(3))
    return _news(base, base, f"Edition {i}: the {topics[i % len(topics)]} reopens", stories)


def _pages(base: str, offsite: str) -> dict[str, tuple[int, bytes]]:
    poll = "(async () => { for (let i = 0; ; i++) await fetch('/poll?n=' + i); })();"
    sections = "".join(
        f"<section style='height:1000px;background:hsl({i * 67 % 360},70%,{30 + i * 9}%)'>"
        f"<h2>Part {i + 1}</h2></section>"
        for i in range(LONG_PAGE_PX // 1000)
    )
    return {
        "/news": (200, _news(base, offsite)),
        "/ja": (200, _page("ja", "朝日", f"<div class='band'></div><h1>{JAPANESE}</h1>",
                           ".band{height:400px;background:#c0142a}h1{margin:40px}")),
        "/zh": (200, _page("zh", "新华", f"<img src='{base}/img/3.png' width='500' height='700'><h1>{CHINESE}</h1>",
                           "img{float:right}h1{margin:60px;color:#0a6b2b}")),
        "/restless": (200, _page("en", "Forum", f"<h1>Live thread</h1><p>first post</p><script>{poll}</script>",
                                 "body{background:#f4e04d}h1{font-size:80px}")),
        "/missing": (404, _page("en", "Not found", "<h1>No such page</h1>")),
        "/long": (200, _page("en", "Long read", f"<h1>The long read</h1>{sections}")),
        "/brief": (200, _page("en", "Brief", "<h1>Ferry fares fall</h1><p>Fares drop by a third from Monday.</p>",
                              "h1{font-size:64px;margin:60px}p{font-size:40px;margin:60px}")),
    }


@cache
def _image(i: int) -> bytes:
    colours = ((220, 90, 30), (30, 140, 200), (90, 170, 60), (120, 60, 160))
    image = Image.new("RGB", (300, 200) if i < 3 else (500, 700), colours[i])
    draw = ImageDraw.Draw(image)
    for k in range(4):
        draw.ellipse((20 + 60 * k, 30 + 20 * k, 90 + 60 * k, 100 + 20 * k), fill=(250, 250, 250 - 50 * k))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


class SiteServer(FixtureServer):
    """The fixture sites on a background thread (a bounded tests/fixture_http.py server): `base_url`,
    `sources` (one per page, in PAGES order), `editions` (one Source per edition page) and `hits`."""

    def __init__(self, max_requests: int = 3000, lifetime_s: float = 600.0, editions: int = 0) -> None:
        super().__init__(max_requests, lifetime_s)
        self.redirects["/offsite"] = self.offsite_url + "/elsewhere"
        self.sources = [Source(name, self.base_url + path, category, lang)
                        for path, (name, lang, category) in PAGES.items()]
        self._pages = _pages(self.base_url, self.offsite_url)
        self._pages |= {f"/edition/{i}": (200, _edition(self.base_url, i)) for i in range(editions)}
        self.editions = [Source(f"edition-{i}", f"{self.base_url}/edition/{i}", "news") for i in range(editions)]

    def source(self, name: str) -> Source:
        """The source named `name`."""
        return next(s for s in self.sources if s.name == name)

    def respond(self, method: str, path: str, params: dict[str, str], headers: Any, body: bytes) -> Reply:
        """A page, an image, the endless poll of /restless, or 404."""
        if path == "/poll":
            time.sleep(POLL_S)
            return 200, "application/json", b"{}"
        if path.startswith("/img/") and path[5:-4].isdigit() and int(path[5:-4]) < 4:
            return 200, "image/png", _image(int(path[5:-4]))
        if path in self._pages:
            status, page = self._pages[path]
            return status, "text/html; charset=utf-8", page
        return 404, "text/plain", b"not found"


@contextmanager
def serve_sites(max_requests: int = 3000, lifetime_s: float = 600.0) -> Iterator[tuple[str, list[Source]]]:
    """The fixture sites while the block runs: their base URL and one Source per page."""
    with SiteServer(max_requests, lifetime_s) as sites:
        yield sites.base_url, sites.sources
