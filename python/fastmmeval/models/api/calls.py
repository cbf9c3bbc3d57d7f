"""What one API call gives: a `Reply`, or a `CallError` saying whether it is worth retrying."""

from __future__ import annotations

import email.utils
import json
import time
from dataclasses import dataclass, field

# Longest wait honored from a Retry-After header; a server asking for more is retried after this.
MAX_RETRY_AFTER_S = 120.0


class CallError(Exception):
    """One failed attempt. `kind`: what went wrong, counted in the usage ("HTTP 500", "timeout",
    "connection", "malformed"); `retry`: worth trying again; `retry_after`: the seconds a 429's
    Retry-After asked for; `fatal`: no request can succeed (bad key, unknown model or endpoint), so
    the run stops with this reason."""

    def __init__(
        self, kind: str, reason: str, *, retry: bool, retry_after: float | None = None, fatal: bool = False
    ) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason
        self.retry = retry
        self.retry_after = retry_after
        self.fatal = fatal

    @property
    def rate_limited(self) -> bool:
        """The server answered 429."""
        return self.kind == "HTTP 429"


@dataclass
class Reply:
    """What one successful call returned."""

    text: str | None = None
    logprobs: list[float] | None = None
    is_greedy: list[bool] | None = None
    usage: dict[str, int] = field(default_factory=dict)


def retry_after_seconds(value: str | None) -> float | None:
    """A Retry-After header (seconds, or an HTTP date) in seconds, capped; None when absent or unreadable."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def status_error(status: int, retry_after: str | None, detail: str, where: str, key_env: str) -> CallError:
    """The CallError for an HTTP error status: 429 rate-limited, 408/409/5xx retried, 401/403/404
    fatal for the whole run, other 4xx a failure of this request alone."""
    detail = " ".join(detail.split())[:300]
    kind = f"HTTP {status}"
    reason = f"{where}: {kind}" + (f": {detail}" if detail else "")
    if status == 429:
        return CallError(kind, reason, retry=True, retry_after=retry_after_seconds(retry_after))
    if status in (408, 409) or status >= 500:
        return CallError(kind, reason, retry=True)
    if status in (401, 403):
        reason += f" (authentication failed: check the key in ${key_env})"
        return CallError(kind, reason, retry=False, fatal=True)
    if status == 404:
        return CallError(kind, reason, retry=False, fatal=True)
    return CallError(kind, reason, retry=False)


def error_detail(raw: bytes) -> str:
    """The message of an OpenAI- or Anthropic-shaped error body, else its first 300 characters."""
    text = raw.decode("utf-8", "replace")
    try:
        error = json.loads(text).get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
        if isinstance(error, str):
            return error
    except (ValueError, AttributeError):
        pass
    return text[:300]
