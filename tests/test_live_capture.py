"""Capturing the fixture sites with the real Chromium: sizes, modes, perceptual hashes, the languages'
text, failed pages recorded with their reasons, the allowlist, the network-idle cap and the cache."""

from __future__ import annotations

import io
import itertools
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import imagehash
import pytest
from live_sites import CHINESE, HEADLINE, JAPANESE, SiteServer
from PIL import Image

from fastmmeval.errors import ConfigError
from fastmmeval.live.capture import PHASH_TOLERANCE, CaptureSettings, capture_pages
from fastmmeval.live.records import Capture, Source
from fastmmeval.live.store import Blobs, StageCache

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium")

FAST = CaptureSettings(idle_cap_s=1.5, page_timeout_s=30)


class Work:
    """A month's blobs and stage cache, and how many browsers were launched."""

    def __init__(self, root: Path) -> None:
        self.blobs = Blobs(root / "blobs")
        self.cache = StageCache(root / "cache.sqlite")
        self.launches = 0

    def capture(self, sources: list[Source], settings: CaptureSettings = FAST, month: str = "2024-06",
                **kwargs: object) -> list[Capture]:
        return capture_pages(sources, settings, self.blobs, self.cache, month, **kwargs)  # type: ignore[arg-type]

    def image(self, sha: str) -> Image.Image:
        return Image.open(io.BytesIO(self.blobs.get(sha, ".png")))


@pytest.fixture(scope="module")
def sites() -> Iterator[SiteServer]:
    with SiteServer() as server:
        yield server


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Work]:
    from playwright.async_api import BrowserType

    work = Work(tmp_path_factory.mktemp("live"))
    launch = BrowserType.launch

    async def counted(self: BrowserType, *args: object, **kwargs: object) -> object:
        work.launches += 1
        return await launch(self, *args, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BrowserType, "launch", counted)
        yield work
    work.cache.close()


@pytest.fixture(scope="module")
def month(sites: SiteServer, work: Work) -> dict[str, Capture]:
    """Every fixture page captured once (single screen), by source name."""
    seen: list[tuple[int, Capture]] = []
    captures = work.capture(sites.sources, done=lambda i, capture: seen.append((i, capture)))
    assert [c.source["name"] for c in captures] == [s.name for s in sites.sources]
    assert sorted(seen, key=lambda s: s[0]) == list(enumerate(captures))  # each one as soon as it was ready
    return {c.source["name"]: c for c in captures}


def captured(month: dict[str, Capture]) -> dict[str, Capture]:
    return {name: c for name, c in month.items() if c.error is None}


def test_pages_are_one_1024_screen_with_their_text_html_status_and_time(month: dict[str, Capture], work: Work) -> None:
    pages = captured(month)
    assert set(pages) == {"news-en", "news-ja", "news-zh", "restless", "long", "brief"}
    for capture in pages.values():
        assert capture.status == 200 and capture.final_url == capture.url and capture.screen_size == "1024x1024"
        assert [work.image(sha).size for sha in capture.screens] == [(1024, 1024)]
        assert time.strptime(capture.captured_at, "%Y-%m-%dT%H:%M:%SZ")
        assert work.blobs.get(capture.html_sha, ".html").decode().startswith("<!DOCTYPE html>")
    text = {name: work.blobs.get(c.text_sha, ".txt").decode() for name, c in pages.items()}
    assert HEADLINE in text["news-en"] and JAPANESE in text["news-ja"] and CHINESE in text["news-zh"]


def test_failed_pages_are_recorded_with_their_reasons(month: dict[str, Capture]) -> None:
    missing, offsite = month["missing"], month["offsite"]
    assert (missing.error, missing.status, missing.screens) == ("HTTP 404", 404, [])
    assert offsite.error == "redirected off the allowlist to host 'localhost'" and offsite.screens == []


def test_nothing_off_the_allowlist_is_fetched(month: dict[str, Capture], sites: SiteServer, work: Work) -> None:
    # The news page embeds an image from localhost (the same server under a name not on the list).
    assert month["news-en"].blocked == ["localhost"]
    assert {host for _, host, _ in sites.hits} == {sites.base_url.removeprefix("http://")}
    refused = work.capture([sites.source("news-ja")], month="2024-09", allow=["example.org"])[0]
    assert refused.error == "host '127.0.0.1' is not on the allowlist"


def test_perceptual_hashes_tell_pages_apart(month: dict[str, Capture]) -> None:
    hashes = {name: imagehash.hex_to_hash(c.phash[0]) for name, c in captured(month).items()}
    for a, b in itertools.combinations(hashes, 2):
        assert hashes[a] - hashes[b] > PHASH_TOLERANCE, (a, b)


def test_a_page_captured_again_is_unchanged(month: dict[str, Capture], sites: SiteServer, work: Work) -> None:
    news = sites.source("news-en")
    again = work.capture([news], month="2024-07", previous={news.url: month["news-en"]})[0]
    assert again.unchanged
    assert imagehash.hex_to_hash(again.phash[0]) - imagehash.hex_to_hash(month["news-en"].phash[0]) <= PHASH_TOLERANCE
    other = work.capture([news], month="2024-07", previous={news.url: month["news-ja"]})[0]
    assert not other.unchanged


def test_a_page_that_never_settles_is_captured_when_the_cap_runs_out(sites: SiteServer, work: Work) -> None:
    start = time.monotonic()
    restless = work.capture([sites.source("restless")], month="2024-08")[0]
    assert restless.error is None and len(restless.screens) == 1
    assert any(path.startswith("/poll") for _, _, path in sites.hits)  # it was still fetching
    assert time.monotonic() - start < FAST.page_timeout_s / 3


def test_rolling_screens_scroll_down_the_page(sites: SiteServer, work: Work) -> None:
    rolling = CaptureSettings(mode="rolling", screens=3, idle_cap_s=1.5)
    long, short = work.capture([sites.source("long"), sites.source("news-ja")], rolling)
    assert [work.image(sha).size for sha in long.screens] == [(1024, 1024)] * 3
    assert len(set(long.phash)) == 3 and long.screen_size == "1024x1024"
    assert len(short.screens) == 1  # the page is shorter than one screen


def test_a_full_page_is_cut_at_max_height(sites: SiteServer, work: Work) -> None:
    full = CaptureSettings(mode="full", max_height=3000, idle_cap_s=1.5)
    long, short = work.capture([sites.source("long"), sites.source("news-ja")], full)
    assert (long.screen_size, work.image(long.screens[0]).size) == ("1024x3000", (1024, 3000))
    assert short.screen_size == "1024x1024"


def test_a_rerun_starts_no_browser(month: dict[str, Capture], sites: SiteServer, work: Work,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    before = work.launches
    monkeypatch.setattr(shutil, "which", lambda name: None)  # Chromium is not even looked for
    again = work.capture(sites.sources)
    assert work.launches == before
    assert [c.record() for c in again] == [c.record() for c in month.values()]


def test_a_page_that_could_not_be_reached_is_tried_again(work: Work) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{free.getsockname()[1]}/"
    down = Source("down", url)
    first = work.capture([down])[0]
    assert first.error is not None and first.error.startswith("browser: net::ERR_CONNECTION_REFUSED")
    launches = work.launches
    work.capture([down])
    assert work.launches == launches + 1


def test_capture_needs_chromium(sites: SiteServer, work: Work, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match="needs Chromium: no `chromium` on PATH"):
        work.capture([sites.source("news-en")], month="2030-01")


@pytest.mark.parametrize(("settings", "message"), [
    ({"mode": "scroll"}, "capture mode 'scroll': expected one of single, rolling, full"),
    ({"screens": 0}, "capture screens must be at least 1, got 0"),
    ({"max_height": 500}, r"capture max_height \(500\) is below the viewport height \(1024\)"),
])
def test_bad_settings_are_one_line(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        CaptureSettings(**settings)  # type: ignore[arg-type]
