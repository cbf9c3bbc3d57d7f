"""The fault-injecting proxy in front of a tiny JSON server: pass-through, seeded faults, limits."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fastmmeval.errors import ConfigError
from fastmmeval.testing.faults import FaultPlan, start_proxy


class _Echo(BaseHTTPRequestHandler):
    """Answers every POST with JSON naming the path, the body and the Authorization header seen."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.hits += 1  # type: ignore[attr-defined]
        reply = json.dumps({"path": self.path, "body": body.decode(), "auth": self.headers.get("Authorization")})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply.encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[ThreadingHTTPServer]:
    """A JSON echo server at http://127.0.0.1:PORT/v1; `.hits` counts the requests it answered."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    server.hits = 0  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _url(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/v1"


def post(url: str, payload: dict, timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """POST JSON; returns status, headers and raw body (error statuses included)."""
    headers = {"Content-Type": "application/json", "Authorization": "Bearer k"}
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status, dict(reply.headers), reply.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def test_clean_proxy_forwards_path_body_and_headers(upstream: ThreadingHTTPServer) -> None:
    with start_proxy(_url(upstream)) as proxy:
        assert proxy.url.endswith("/v1") and proxy.url != _url(upstream)
        status, _, body = post(proxy.url + "/chat/completions", {"q": 1})
        stats = proxy.stats
    assert status == 200
    assert json.loads(body) == {"path": "/v1/chat/completions", "body": '{"q": 1}', "auth": "Bearer k"}
    assert (stats.requests, stats.forwarded, upstream.hits) == (1, 1, 1)
    assert stats.by_path == {"/v1/chat/completions": 1} and not stats.faults


def test_faults_follow_the_seeded_plan(upstream: ThreadingHTTPServer) -> None:
    rates = {"rate_429": 0.15, "rate_500": 0.15, "rate_truncated": 0.15, "rate_malformed": 0.15}
    plan = FaultPlan(**rates, seed=3)
    expected = [plan.fault(i) for i in range(60)]
    assert {"429", "500", "truncated", "malformed", None} <= set(expected)
    with start_proxy(_url(upstream), **rates, retry_after=2.5, seed=3) as proxy:
        for i, fault in enumerate(expected):
            status, headers, body = post(proxy.url + "/chat/completions", {"i": i})
            if fault == "429":
                assert status == 429 and headers["Retry-After"] == "2.5"
                assert json.loads(body)["error"]["type"] == "rate_limit_error"
            elif fault == "500":
                assert status == 500 and "message" in json.loads(body)["error"]
            else:
                assert status == 200
                if fault is None:
                    assert json.loads(body)["body"] == json.dumps({"i": i})
                else:
                    with pytest.raises(json.JSONDecodeError):
                        json.loads(body)
        stats = proxy.stats
    forwarded = sum(f in (None, "truncated", "malformed") for f in expected)
    assert stats.forwarded == upstream.hits == forwarded
    assert stats.faults == {f: expected.count(f) for f in set(expected) - {None}}
    assert stats.requests == 60 and len(stats.by_body) == 60


def test_same_seed_same_faults_and_rates_are_honoured() -> None:
    a = [FaultPlan(rate_500=0.2, rate_hang=0.1, seed=7).fault(i) for i in range(4000)]
    assert a == [FaultPlan(rate_500=0.2, rate_hang=0.1, seed=7).fault(i) for i in range(4000)]
    assert a != [FaultPlan(rate_500=0.2, rate_hang=0.1, seed=8).fault(i) for i in range(4000)]
    assert abs(a.count("500") / 4000 - 0.2) < 0.03 and abs(a.count("hang") / 4000 - 0.1) < 0.02


def test_hang_outlasts_the_client_timeout_and_frees_its_slot(upstream: ThreadingHTTPServer) -> None:
    proxy = start_proxy(_url(upstream), rate_hang=1.0, hang_s=60, max_concurrency=1)
    with pytest.raises((TimeoutError, socket.timeout, urllib.error.URLError)):
        post(proxy.url + "/chat/completions", {}, timeout=0.3)
    deadline = time.monotonic() + 5
    while proxy.stats.in_flight and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proxy.stats.in_flight == 0, "the hung request's slot was not released on disconnect"
    started = time.monotonic()
    proxy.stop()
    assert time.monotonic() - started < 5
    assert proxy.stats.faults == {"hang": 1} and upstream.hits == 0


def test_requests_above_the_concurrency_limit_get_429(upstream: ThreadingHTTPServer) -> None:
    with start_proxy(_url(upstream), latency_s=0.5, max_concurrency=2, retry_after=1) as proxy:
        with ThreadPoolExecutor(5) as pool:
            replies = list(pool.map(lambda i: post(proxy.url + "/chat/completions", {"i": i}), range(5)))
        stats = proxy.stats
    statuses = sorted(status for status, _, _ in replies)
    assert statuses == [200, 200, 429, 429, 429]
    assert all(h["Retry-After"] == "1" for s, h, _ in replies if s == 429)
    assert stats.faults == {"429_limit": 3} and stats.max_in_flight == 2 and upstream.hits == 2


def test_unreachable_upstream_is_a_502() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with start_proxy(f"http://127.0.0.1:{port}/v1") as proxy:
        status, _, body = post(proxy.url + "/models", {})
    assert status == 502 and "upstream unreachable" in json.loads(body)["error"]["message"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rate_429": 0.6, "rate_500": 0.6}, "sum to 1.200"),
        ({"rate_hang": -0.1}, "rate_hang=-0.1"),
        ({"max_concurrency": 0}, "max_concurrency=0"),
    ],
)
def test_bad_settings_are_one_line_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        start_proxy("http://127.0.0.1:1/v1", **kwargs)


def test_non_http_upstream_is_refused() -> None:
    with pytest.raises(ConfigError, match="not an http"):
        start_proxy("ftp://example/v1")
