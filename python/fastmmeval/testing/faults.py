"""A fault-injecting HTTP reverse proxy for testing API clients against a real server.

`start_proxy(upstream)` listens on a local port and forwards every request to `upstream`, injecting
faults chosen by the request's sequence number (0, 1, 2, ... in order of arrival) and a seed, so a
given seed and request count always yield the same faults:

- ``"429"``: a rate-limit error with a ``Retry-After`` header (not forwarded);
- ``"500"``: a server error (not forwarded);
- ``"hang"``: no answer for ``hang_s`` seconds (meant to outlast the client's timeout), then 504;
- ``"truncated"``: the upstream's answer cut to its first half (a complete HTTP response, bad JSON);
- ``"malformed"``: the upstream's answer with a stray leading ``{``, so it no longer parses.

``latency_s`` delays every forwarded request, and ``max_concurrency`` answers 429 (fault
``"429_limit"``) to a request arriving while that many are already in flight. Bodies are buffered
(no streaming). Request contents, headers and API keys are never logged.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import random
import threading
from collections import Counter
from dataclasses import dataclass, field, fields

import aiohttp
from aiohttp import web
from yarl import URL

from fastmmeval.errors import ConfigError

FAULTS = ("429", "500", "hang", "truncated", "malformed")
LIMIT_FAULT = "429_limit"
_HOP_HEADERS = frozenset(
    h.lower()
    for h in (
        "Host",
        "Content-Length",
        "Transfer-Encoding",
        "Connection",
        "Keep-Alive",
        "Accept-Encoding",
        "Content-Encoding",
        "Date",
        "Server",
    )
)


@dataclass(frozen=True)
class FaultPlan:
    """Per-request fault probabilities (summing to at most 1) and the seed that fixes the draws."""

    rate_429: float = 0.0
    rate_500: float = 0.0
    rate_hang: float = 0.0
    rate_truncated: float = 0.0
    rate_malformed: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.startswith("rate_") and not 0.0 <= value <= 1.0:
                raise ConfigError(f"fault proxy: {f.name}={value} must lie in [0, 1]")
        if sum(self.rates()) > 1.0 + 1e-9:
            raise ConfigError(f"fault proxy: the fault rates sum to {sum(self.rates()):.3f}, more than 1")

    def rates(self) -> tuple[float, ...]:
        """The rates in the order of `FAULTS`."""
        return (self.rate_429, self.rate_500, self.rate_hang, self.rate_truncated, self.rate_malformed)

    def fault(self, seq: int) -> str | None:
        """The fault injected into request number `seq`, or None for a clean pass-through."""
        draw = random.Random(f"{self.seed}:{seq}").random()
        edge = 0.0
        for name, rate in zip(FAULTS, self.rates(), strict=True):
            edge += rate
            if draw < edge:
                return name
        return None


@dataclass
class ProxyStats:
    """What the proxy saw. `requests`: every request received, faulted or not; `forwarded`: those
    sent on to the upstream; `in_flight` / `max_in_flight`: admitted and not yet answered (now / at
    most); `faults`: injected faults by name (`FAULTS` and `"429_limit"`); `by_path`: requests per URL
    path; `by_body`: requests per SHA-256 hex digest of the body (to spot repeated calls)."""

    requests: int = 0
    forwarded: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    by_path: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    by_body: Counter[str] = field(default_factory=Counter)


def _error(status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> web.Response:
    """An error in OpenAI's JSON shape."""
    body = {"error": {"message": message, "type": kind, "param": None, "code": status}}
    return web.json_response(body, status=status, headers=headers)


class _Proxy:
    """The proxy's state and request handler; lives on the proxy thread's event loop."""

    def __init__(
        self,
        upstream: URL,
        plan: FaultPlan,
        retry_after: float,
        hang_s: float,
        latency_s: float,
        max_concurrency: int | None,
    ) -> None:
        self.upstream = upstream.origin()
        self.plan = plan
        self.retry_after = retry_after
        self.hang_s = hang_s
        self.latency_s = latency_s
        self.max_concurrency = max_concurrency
        self.stats = ProxyStats()
        self.lock = threading.Lock()
        self.session: aiohttp.ClientSession | None = None
        self.runner: web.AppRunner | None = None

    async def start(self, host: str, port: int) -> int:
        """Open the upstream session and listen; returns the bound port."""
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=None)
        )
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=0.5)
        await self.runner.setup()
        site = web.TCPSite(self.runner, host, port)
        await site.start()
        return self.runner.addresses[0][1]

    async def close(self) -> None:
        """Stop listening (cancelling hung requests) and close the upstream session."""
        if self.runner is not None:
            await self.runner.cleanup()
        if self.session is not None:
            await self.session.close()

    def _count_fault(self, fault: str) -> None:
        with self.lock:
            self.stats.faults[fault] += 1

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Forward one request, or answer it with the fault its sequence number draws."""
        body = await request.read()
        with self.lock:
            seq = self.stats.requests
            self.stats.requests += 1
            self.stats.by_path[request.path] += 1
            self.stats.by_body[hashlib.sha256(body).hexdigest()] += 1
        retry = {"Retry-After": f"{self.retry_after:g}"}
        if self.max_concurrency is not None and self.stats.in_flight >= self.max_concurrency:
            self._count_fault(LIMIT_FAULT)
            return _error(429, "fault proxy: too many concurrent requests", "rate_limit_error", retry)
        fault = self.plan.fault(seq)
        if fault is not None:
            self._count_fault(fault)
        if fault == "429":
            return _error(429, "fault proxy: injected rate limit", "rate_limit_error", retry)
        if fault == "500":
            return _error(500, "fault proxy: injected server error", "server_error")
        with self.lock:
            self.stats.in_flight += 1
            self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)
        try:
            if fault == "hang":
                await asyncio.sleep(self.hang_s)
                return _error(504, "fault proxy: injected hang", "timeout")
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            return await self._forward(request, body, fault)
        finally:
            with self.lock:
                self.stats.in_flight -= 1

    async def _forward(self, request: web.Request, body: bytes, fault: str | None) -> web.Response:
        assert self.session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        target = self.upstream.with_path(request.path).with_query(request.query)
        try:
            async with self.session.request(request.method, target, headers=headers, data=body) as upstream:
                payload = await upstream.read()
                status = upstream.status
                reply_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_HEADERS}
        except (aiohttp.ClientError, OSError) as exc:
            return _error(502, f"fault proxy: upstream unreachable ({type(exc).__name__})", "upstream_error")
        with self.lock:
            self.stats.forwarded += 1
        if fault == "truncated":
            payload = payload[: len(payload) // 2]
        elif fault == "malformed":
            payload = b"{" + payload
        return web.Response(body=payload, status=status, headers=reply_headers)


def _shutdown(proxy: _Proxy, loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    asyncio.run_coroutine_threadsafe(proxy.close(), loop).result(timeout=30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=30)
    loop.close()


class ProxyHandle:
    """A running proxy: `url` to point clients at, `stats` to read, `stop()` (or `with`) to end it."""

    def __init__(self, proxy: _Proxy, loop: asyncio.AbstractEventLoop, thread: threading.Thread, url: str) -> None:
        self._proxy = proxy
        self._loop = loop
        self._thread = thread
        self.url = url

    @property
    def stats(self) -> ProxyStats:
        """A snapshot of the counts so far."""
        with self._proxy.lock:
            return copy.deepcopy(self._proxy.stats)

    def stop(self) -> None:
        """Stop the proxy and its thread; safe to call twice."""
        if self._thread.is_alive():
            _shutdown(self._proxy, self._loop, self._thread)

    def __enter__(self) -> ProxyHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ProxyHandle(url={self.url!r})"


def start_proxy(
    upstream_url: str,
    *,
    rate_429: float = 0.0,
    retry_after: float = 1.0,
    rate_500: float = 0.0,
    rate_hang: float = 0.0,
    hang_s: float = 30.0,
    rate_truncated: float = 0.0,
    rate_malformed: float = 0.0,
    latency_s: float = 0.0,
    max_concurrency: int | None = None,
    seed: int = 0,
    host: str = "127.0.0.1",
    port: int = 0,
) -> ProxyHandle:
    """Start a fault-injecting proxy in front of `upstream_url` on a background thread.

    The returned handle's `url` has the same path as `upstream_url` (e.g. ``http://127.0.0.1:PORT/v1``),
    and requests keep their path when forwarded.
    """
    upstream = URL(upstream_url)
    if upstream.scheme not in ("http", "https") or not upstream.host:
        raise ConfigError(f"fault proxy: upstream_url {upstream_url!r} is not an http(s) URL")
    if min(retry_after, latency_s) < 0 or hang_s <= 0:
        raise ConfigError("fault proxy: retry_after and latency_s must be >= 0 and hang_s > 0")
    if max_concurrency is not None and max_concurrency < 1:
        raise ConfigError(f"fault proxy: max_concurrency={max_concurrency} must be at least 1")
    plan = FaultPlan(rate_429, rate_500, rate_hang, rate_truncated, rate_malformed, seed)
    proxy = _Proxy(upstream, plan, retry_after, hang_s, latency_s, max_concurrency)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fault-proxy", daemon=True)
    thread.start()
    try:
        bound = asyncio.run_coroutine_threadsafe(proxy.start(host, port), loop).result(timeout=30)
    except BaseException:
        _shutdown(proxy, loop, thread)
        raise
    path = upstream.path.rstrip("/")
    return ProxyHandle(proxy, loop, thread, f"http://{host}:{bound}{path}")
