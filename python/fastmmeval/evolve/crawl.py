"""The crawl executor (MMBench-Live's source-specific structured retrieval): the allowlisted sites' pages in
headless Chromium (the live pipeline's launcher and allowlist guard), every `<img>` rendered at least the
minimum side on both sides with its alt text, figcaption, nearby text and the date of the article it is
in; each image then fetched from an allowlisted host, image/* only, and ranked by the query like a
folder's. The pages are crawled once per source; later queries rank the same images."""

from __future__ import annotations

import asyncio
import re
import threading
from typing import Any
from urllib.parse import urljoin, urlsplit

from fastmmeval.errors import ConfigError
from fastmmeval.evolve.fetch import FetchError, http_get
from fastmmeval.evolve.sanitize import Rejected
from fastmmeval.evolve.sources import BaseSource, Found, Retrieved, rank
from fastmmeval.live.capture import Guard, chromium, first_line, settle
from fastmmeval.live.records import Source
from fastmmeval.live.sources import allowed_hosts, host_allowed
from fastmmeval.live.store import Blobs

NEARBY_CHARS = 400
# Each <img>: its URL, rendered size, whether it failed to load, alt text, figcaption, the nearest
# enclosing text (at least a short sentence of it) and the datetime of the <time> in its article, section
# or figure.
_IMAGES_JS = """(limit) => Array.from(document.images).map(img => {
  const box = img.getBoundingClientRect();
  const figure = img.closest('figure');
  const caption = figure && figure.querySelector('figcaption') ? figure.querySelector('figcaption').innerText : '';
  let block = (figure || img).parentElement;
  while (block && block !== document.body && (block.innerText || '').trim().length < 20) block = block.parentElement;
  const holder = img.closest('article, section') || figure;
  const time = holder ? holder.querySelector('time[datetime]') : null;
  return {src: img.currentSrc || img.src, width: box.width, height: box.height, alt: img.alt || '', caption,
          broken: img.complete && img.naturalWidth === 0, nearby: block ? block.innerText.slice(0, limit) : '',
          time: time ? time.getAttribute('datetime') : ''};
})"""


class CrawlSource(BaseSource):
    """Images on the `sites` (page URLs); the browser and the image fetches reach only the sites' hosts
    and `allow_hosts` (e.g. an image CDN), and their subdomains."""

    name = "crawl"

    def __init__(self, sites: list[str], allow_hosts: list[str] | tuple[str, ...] = (), idle_cap_s: float = 5.0,
                 page_timeout_s: float = 30.0, **settings: Any) -> None:
        super().__init__(**settings)
        if not sites:
            raise ConfigError("evolve source crawl: no sites given")
        for url in sites:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ConfigError(f"evolve source crawl: site {url!r} is not an http(s) URL with a host")
        self.sites = list(sites)
        self.allowed = allowed_hosts([Source(f"site{i}", url) for i, url in enumerate(sites)], allow_hosts)
        self.idle_cap_s = idle_cap_s
        self.page_timeout_s = page_timeout_s
        self._lock = threading.Lock()
        self._crawled: tuple[list[Found], list[dict[str, str]]] | None = None

    def fingerprint(self) -> dict[str, Any]:
        """The sites, the allowlist and the window."""
        return {**self.settings(), "sites": self.sites, "allow_hosts": sorted(self.allowed)}

    def retrieve(self, query: str, limit: int, blobs: Blobs) -> Retrieved:
        """The best `limit` images for `query` by the words shared with their page title, alt text,
        figcaption and nearby text (ties in page order); `dropped` starts with the pages that failed and
        the images rendered too small."""
        found, skipped = self.crawl()
        order = rank(query, [f.text() for f in found])
        out = self.collect([found[i] for i in order], query, limit, blobs, self._load)
        out.dropped[:0] = skipped
        return out

    def crawl(self) -> tuple[list[Found], list[dict[str, str]]]:
        """The images found on the sites (first sighting of each URL, in site then page order), and the
        pages and images skipped with their reasons. Crawled on the first call only."""
        with self._lock:
            if self._crawled is None:
                self._crawled = asyncio.run(self._crawl())
            return self._crawled

    async def _crawl(self) -> tuple[list[Found], list[dict[str, str]]]:
        from playwright.async_api import Error as PlaywrightError

        found: dict[str, Found] = {}
        skipped: list[dict[str, str]] = []
        async with chromium(self.allowed, "the evolve crawl") as browser:
            context = await browser.new_context(viewport={"width": 1280, "height": 1024}, locale="en-US",
                                                timezone_id="UTC", service_workers="block")
            guard = Guard(self.allowed)
            await context.route(re.compile(r"^https?://"), guard.route)
            try:
                for url in self.sites:
                    try:
                        images, reason = await self._page(context, guard, url)
                    except PlaywrightError as e:
                        images, reason = [], f"page: {first_line(e)}"
                    if reason:
                        skipped.append({"url": url, "reason": reason})
                    for item in images:
                        if isinstance(item, dict):
                            skipped.append(item)
                        elif item.url not in found:
                            found[item.url] = item
            finally:
                await context.close()
        return list(found.values()), skipped

    async def _page(self, context: Any, guard: Guard, url: str) -> tuple[list[Found | dict[str, str]], str]:
        """The images of one page (or the reason it gave none)."""
        from playwright.async_api import TimeoutError as PlaywrightTimeoutError

        page = await context.new_page()
        page.set_default_timeout(self.page_timeout_s * 1000)
        page.on("request", guard.redirected)
        try:
            try:
                response = await page.goto(url, wait_until="domcontentloaded")
            except PlaywrightTimeoutError:
                return [], f"page: no page within {self.page_timeout_s:g} s"
            if response is None or response.status >= 400:
                return [], f"page: HTTP {response.status if response else 'no response'}"
            await settle(page, self.idle_cap_s)
            title, where = await page.title(), page.url
            raw = await page.evaluate(_IMAGES_JS, NEARBY_CHARS)
        finally:
            await page.close()
        out: list[Found | dict[str, str]] = []
        for image in raw:
            src = urljoin(where, image["src"])
            reason = self._unseen(src, image)
            if reason:
                out.append({"url": src, "reason": reason})
                continue
            caption = " ".join(image["caption"].split())
            nearby = " ".join(image["nearby"].replace(image["caption"], " ").split())
            context_text = "\n".join(dict.fromkeys(p for p in (image["alt"].strip(), caption, nearby) if p))
            out.append(Found(src, src, where, title.strip(), context_text, image["time"].strip()))
        return out, ""

    def _unseen(self, src: str, image: dict[str, Any]) -> str | None:
        """Why an <img> was not a picture on the page (off the allowlist, broken, too small), or None."""
        host = urlsplit(src).hostname or ""
        if not host_allowed(host, self.allowed):
            return f"host {host!r} is not on the allowlist"
        if image["broken"]:
            return "the browser could not show it (not an image, or refused)"
        if image["width"] < self.caps.min_side or image["height"] < self.caps.min_side:
            return f"rendered at {image['width']:.0f}x{image['height']:.0f} px, a side under {self.caps.min_side}"
        return None

    def _load(self, item: Found) -> bytes:
        try:
            fetched = http_get(item.url, self.caps.max_bytes, self.timeout_s, self.allowed)
        except FetchError as e:
            raise Rejected(f"fetch: {e}") from None
        if not fetched.content_type.startswith("image/"):
            raise Rejected(f"content type {fetched.content_type or 'none'}, not an image")
        return fetched.body
