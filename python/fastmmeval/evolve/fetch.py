"""Bounded HTTP for the image sources: every request has a timeout and a cap on the bytes it reads, goes
only to http(s) URLs and, where an allowlist is given, only to its hosts (each redirect hop too)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from fastmmeval.live.sources import host_allowed

USER_AGENT = "fastmmeval-evolve/0.1"


class FetchError(Exception):
    """A request that failed; the message is one line saying why (never the request's credentials)."""


@dataclass(frozen=True)
class Fetched:
    """A response: where it ended up, its content type (lower case, no parameters) and body."""

    url: str
    content_type: str
    body: bytes


def http_get(url: str, max_bytes: int, timeout_s: float, allowed: frozenset[str] | None = None,
             headers: Mapping[str, str] | None = None) -> Fetched:
    """GET `url` (an allowlist of hosts, or None for any host); FetchError if it fails."""
    return _request(urllib.request.Request(url, headers=_headers(headers)), max_bytes, timeout_s, allowed)


def http_post_json(url: str, body: Any, max_bytes: int, timeout_s: float,
                   headers: Mapping[str, str] | None = None) -> Any:
    """POST `body` as JSON to `url`; the JSON reply, or FetchError."""
    data = json.dumps(body).encode("utf-8")
    request = urllib.request.Request(url, data, _headers({"Content-Type": "application/json", **(headers or {})}))
    return parse_json(_request(request, max_bytes, timeout_s, None))


def parse_json(fetched: Fetched) -> Any:
    """The body of `fetched` as JSON, or FetchError."""
    try:
        return json.loads(fetched.body)
    except ValueError:
        raise FetchError(f"the reply is not JSON ({fetched.content_type or 'no content type'})") from None


def _headers(extra: Mapping[str, str] | None) -> dict[str, str]:
    return {"User-Agent": USER_AGENT, **(extra or {})}


def _check_url(url: str, allowed: frozenset[str] | None) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FetchError(f"not an http(s) URL: {url[:200]!r}")
    if allowed is not None and not host_allowed(parts.hostname, allowed):
        raise FetchError(f"host {parts.hostname!r} is not on the allowlist")


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to an http(s) URL on the allowlist."""

    max_redirections = 5

    def __init__(self, allowed: frozenset[str] | None) -> None:
        self.allowed = allowed

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> urllib.request.Request | None:
        try:
            _check_url(newurl, self.allowed)
        except FetchError as e:
            raise FetchError(f"redirected: {e}") from None
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _request(request: urllib.request.Request, max_bytes: int, timeout_s: float,
             allowed: frozenset[str] | None) -> Fetched:
    _check_url(request.full_url, allowed)
    opener = urllib.request.build_opener(_Redirects(allowed))
    try:
        with opener.open(request, timeout=timeout_s) as response:
            length = response.headers.get("Content-Length")
            if length is not None and length.isdigit() and int(length) > max_bytes:
                raise FetchError(f"{int(length):,} bytes, over the cap of {max_bytes:,}")
            body = response.read(max_bytes + 1)
            if len(body) > max_bytes:
                raise FetchError(f"over the cap of {max_bytes:,} bytes")
            kind = response.headers.get_content_type() if response.headers.get("Content-Type") else ""
            return Fetched(response.geturl(), kind.lower(), body)
    except urllib.error.HTTPError as e:
        raise FetchError(f"HTTP {e.code}") from None
    except TimeoutError:
        raise FetchError(f"no reply within {timeout_s:g} s") from None
    except urllib.error.URLError as e:
        reason = e.reason if isinstance(e.reason, str) else type(e.reason).__name__ + f": {e.reason}"
        raise FetchError(f"cannot connect ({reason})") from None
    except OSError as e:  # a connection reset while reading
        raise FetchError(f"connection failed ({type(e).__name__}: {e})") from None
