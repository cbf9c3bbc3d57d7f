"""Capture, the month's second step: screenshots of each source in headless Chromium (Debian's, driven
by Playwright), with the page's text and HTML, where the browser ended up, the HTTP status and the UTC
time. Captures are deterministic (fixed viewport, scale, locale, timezone, reduced motion, animations
stopped), never leave the allowlist, and are cached per (month, URL, settings): a rerun starts no
browser for the pages it already has."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import re
import shutil
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from fastmmeval.errors import ConfigError
from fastmmeval.live.records import Capture, Source
from fastmmeval.live.sources import allowed_hosts, host_allowed
from fastmmeval.live.store import Blobs, StageCache, content_key

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page, Route
    from playwright.async_api import Request as BrowserRequest

MODES = ("single", "rolling", "full")
# Two captures whose 64-bit perceptual hashes differ in at most this many bits show the same page: a
# clock or a rotating ad moves a few bits, a new lead story many more.
PHASH_TOLERANCE = 6
# Hosts that can be written into Chromium's resolver rules; any other host stays unresolvable.
_PLAIN_HOST = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?")
_API_PREFIX = re.compile(r"^\w+\.\w+: ")
_TWO_FRAMES = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"


@dataclass(frozen=True)
class CaptureSettings:
    """How pages are captured. `mode`: one viewport screenshot (`single`), `screens` viewports scrolled
    down the page (`rolling`), or the whole page cut at `max_height` pixels (`full`). A page still
    fetching after `idle_cap_s` is captured as it is then; one that does not load within
    `page_timeout_s` fails. `contexts` pages are captured at once, each in its own browser context."""

    mode: str = "single"
    width: int = 1024
    height: int = 1024
    device_scale: float = 1.0
    locale: str = "en-US"
    timezone: str = "UTC"
    reduced_motion: bool = True
    screens: int = 3
    max_height: int = 8192
    idle_cap_s: float = 10.0
    page_timeout_s: float = 30.0
    contexts: int = 4

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"capture mode {self.mode!r}: expected one of {', '.join(MODES)}")
        for name in ("width", "height", "screens", "contexts"):
            if getattr(self, name) < 1:
                raise ConfigError(f"capture {name} must be at least 1, got {getattr(self, name)}")
        for name in ("device_scale", "idle_cap_s", "page_timeout_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"capture {name} must be above 0, got {getattr(self, name)}")
        if self.max_height < self.height:
            raise ConfigError(f"capture max_height ({self.max_height}) is below the viewport height ({self.height})")

    def fingerprint(self) -> dict[str, Any]:
        """What shapes a capture: every setting but `contexts` (how many pages run at once)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "contexts"}


def capture_pages(
    sources: Sequence[Source],
    settings: CaptureSettings,
    blobs: Blobs,
    cache: StageCache,
    month: str,
    previous: Mapping[str, Capture] | None = None,
    allow: Iterable[str] | None = None,
    done: Callable[[int, Capture], None] | None = None,
) -> list[Capture]:
    """One Capture per source, in source order, failed pages included (with `error` set). `previous`
    maps a source URL to its capture of an earlier month: a page that looks the same is `unchanged`.
    `allow` is the allowlist (default: the sources' own hosts). `done(i, capture)` is called as each
    source's capture is ready (cached ones first), from the calling thread, so later stages can start on
    a page while others are still loading. Each capture is cached as it finishes; one that timed out or
    hit a browser error is not, so a rerun tries it again."""
    allowed = allowed_hosts(sources) if allow is None else frozenset(allow)
    keys = [content_key("capture", month, s.url, settings.fingerprint()) for s in sources]
    captures: dict[int, Capture] = {}

    def finished(i: int, capture: Capture, lasting: bool) -> None:
        if lasting:
            cache.put(keys[i], "capture", capture.record())
        capture.unchanged = same_page(capture, (previous or {}).get(capture.url))
        captures[i] = capture
        if done:
            done(i, capture)

    for i, key in enumerate(keys):
        hit = cache.get(key)
        if hit is not None:
            finished(i, Capture.from_record(hit), lasting=False)
    todo = [i for i in range(len(sources)) if i not in captures]
    if todo:
        asyncio.run(_capture_all([(i, sources[i]) for i in todo], settings, blobs, allowed, finished))
    return [captures[i] for i in range(len(sources))]


def same_page(capture: Capture, earlier: Capture | None) -> bool:
    """Whether two captures show the same page: as many screens, each within PHASH_TOLERANCE bits."""
    import imagehash

    if earlier is None or not capture.phash or len(capture.phash) != len(earlier.phash):
        return False
    return all(
        imagehash.hex_to_hash(a) - imagehash.hex_to_hash(b) <= PHASH_TOLERANCE
        for a, b in zip(capture.phash, earlier.phash, strict=True)
    )


@contextlib.asynccontextmanager
async def chromium(allowed: frozenset[str], user: str = "live capture") -> AsyncIterator[Browser]:
    """Debian's Chromium driven by Playwright, whose resolver reaches the `allowed` hosts only, closed when
    the block ends; a ConfigError naming `user` (what needs it) if it cannot start."""
    executable = shutil.which("chromium")
    if executable is None:
        raise ConfigError(f"{user} needs Chromium: no `chromium` on PATH (Debian: apt-get install chromium)")
    try:
        from playwright.async_api import Error as PlaywrightError
        from playwright.async_api import async_playwright
    except ImportError:
        raise ConfigError(f"{user} needs Playwright: pip install 'fastmmeval[live]'") from None
    async with async_playwright() as playwright:
        try:
            browser = await playwright.chromium.launch(executable_path=executable, args=[_resolver_rules(allowed)])
        except PlaywrightError as e:
            raise ConfigError(f"could not start Chromium ({executable}): {first_line(e)}") from None
        try:
            yield browser
        finally:
            await browser.close()


async def _capture_all(
    jobs: list[tuple[int, Source]],
    settings: CaptureSettings,
    blobs: Blobs,
    allowed: frozenset[str],
    finished: Callable[[int, Capture, bool], None],
) -> None:
    async with chromium(allowed) as browser:
        gate = asyncio.Semaphore(settings.contexts)

        async def one(i: int, source: Source) -> None:
            async with gate:
                capture, lasting = await _capture(browser, source, settings, blobs, allowed)
            finished(i, capture, lasting)

        await asyncio.gather(*(one(i, source) for i, source in jobs))


def _resolver_rules(allowed: frozenset[str]) -> str:
    """Chromium's resolver rules that leave every host but the allowed ones unresolvable: the guard for
    redirect hops, which Playwright's routes do not see."""
    hosts = sorted(h for h in allowed if _PLAIN_HOST.fullmatch(h))
    exclude = [f"EXCLUDE {pattern}" for h in hosts for pattern in (h, f"*.{h}")]
    return "--host-resolver-rules=" + ", ".join(["MAP * ~NOTFOUND", *exclude])


class Guard:
    """The allowlist at work in one browser context: refuses the requests off it, noting their hosts
    (`blocked`) and the main-frame navigations among them (`refused`)."""

    def __init__(self, allowed: frozenset[str]) -> None:
        self.allowed = allowed
        self.blocked: set[str] = set()
        self.refused: list[str] = []

    def refuses(self, request: BrowserRequest) -> bool:
        """Whether `request` goes off the allowlist (and if so, notes where)."""
        host = urlsplit(request.url).hostname or ""
        if host_allowed(host, self.allowed):
            return False
        self.blocked.add(host)
        if request.is_navigation_request() and request.frame.parent_frame is None:
            self.refused.append(host)
        return True

    async def route(self, route: Route) -> None:
        """Abort a request off the allowlist, let the others through."""
        if self.refuses(route.request):
            await route.abort("blockedbyclient")
        else:
            await route.continue_()

    def redirected(self, request: BrowserRequest) -> None:
        """Note a redirect hop off the allowlist (routes never see one; Chromium's resolver stops it)."""
        if request.redirected_from is not None:
            self.refuses(request)


async def _capture(
    browser: Browser, source: Source, settings: CaptureSettings, blobs: Blobs, allowed: frozenset[str]
) -> tuple[Capture, bool]:
    """The capture of one page, and whether it lasts (is cached): a timeout or browser error does not."""
    from playwright.async_api import Error as PlaywrightError
    from playwright.async_api import TimeoutError as PlaywrightTimeoutError

    guard = Guard(allowed)

    def failed(reason: str, **found: Any) -> Capture:
        return Capture(source.record(), settings.mode, source.url, captured_at=_utc_now(), error=reason,
                       blocked=sorted(guard.blocked), **found)

    host = urlsplit(source.url).hostname or ""
    if not host_allowed(host, allowed):
        return failed(f"host {host!r} is not on the allowlist"), True
    try:
        context = await browser.new_context(
            viewport={"width": settings.width, "height": settings.height},
            device_scale_factor=settings.device_scale,
            locale=settings.locale,
            timezone_id=settings.timezone,
            reduced_motion="reduce" if settings.reduced_motion else "no-preference",
            color_scheme="light",
            service_workers="block",
        )
    except PlaywrightError as e:
        return failed(f"browser: {first_line(e)}"), False
    try:
        await context.route(re.compile(r"^https?://"), guard.route)
        page = await context.new_page()
        page.set_default_timeout(settings.page_timeout_s * 1000)
        page.on("request", guard.redirected)
        try:
            response = await page.goto(source.url, wait_until="domcontentloaded")
        except PlaywrightTimeoutError:
            return failed(f"no page within {settings.page_timeout_s:g} s"), False
        except PlaywrightError:
            if guard.refused:
                return failed(f"redirected off the allowlist to host {guard.refused[0]!r}"), True
            raise
        if response is None:
            return failed("browser: no response"), False
        if response.status >= 400:
            return failed(f"HTTP {response.status}", status=response.status, final_url=page.url), True
        await settle(page, settings.idle_cap_s)
        pngs = await _screens(page, settings)
        text = await page.evaluate("() => document.body ? document.body.innerText : ''")
        html = await page.content()
    except PlaywrightError as e:
        return failed(f"browser: {first_line(e)}"), False
    finally:
        with contextlib.suppress(PlaywrightError):
            await context.unroute_all(behavior="ignoreErrors")
            await context.close()
    return Capture(
        source.record(),
        settings.mode,
        source.url,
        final_url=page.url,
        status=response.status,
        captured_at=_utc_now(),
        screens=[blobs.put(png, ".png") for png in pngs],
        phash=[_phash(png) for png in pngs],
        screen_size=_size(pngs[0]),
        text_sha=blobs.put(text.encode("utf-8"), ".txt"),
        html_sha=blobs.put(html.encode("utf-8"), ".html"),
        blocked=sorted(guard.blocked),
    ), True


async def settle(page: Page, cap_s: float) -> None:
    """Wait for the load event, then for the network to go quiet, `cap_s` seconds at most in all."""
    from playwright.async_api import TimeoutError as PlaywrightTimeoutError

    loop = asyncio.get_running_loop()
    deadline = loop.time() + cap_s
    for state in ("load", "networkidle"):
        left = deadline - loop.time()
        if left <= 0:
            return
        try:
            await page.wait_for_load_state(state, timeout=left * 1000)
        except PlaywrightTimeoutError:
            return


async def _screens(page: Page, settings: CaptureSettings) -> list[bytes]:
    """The PNG screenshots `settings.mode` asks for."""
    if settings.mode == "single":
        return [await page.screenshot(animations="disabled")]
    page_height = await page.evaluate("() => document.documentElement.scrollHeight")
    if settings.mode == "full":
        height = min(max(page_height, settings.height), settings.max_height)
        clip = {"x": 0, "y": 0, "width": settings.width, "height": height}
        return [await page.screenshot(full_page=True, clip=clip, animations="disabled")]
    shots = []
    for i in range(settings.screens):
        if i and i * settings.height >= page_height:
            break
        await page.evaluate("y => window.scrollTo(0, y)", i * settings.height)
        await page.evaluate(_TWO_FRAMES)
        shots.append(await page.screenshot(animations="disabled"))
    return shots


def _phash(png: bytes) -> str:
    import imagehash
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        return str(imagehash.phash(image))


def _size(png: bytes) -> str:
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        return f"{image.width}x{image.height}"


def _utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def first_line(error: BaseException) -> str:
    """The error's first line without Playwright's 'Page.goto: ' in front."""
    line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return _API_PREFIX.sub("", line)
