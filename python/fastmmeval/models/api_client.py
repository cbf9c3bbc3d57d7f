"""What the API backends share: adaptive concurrency, retries, a persistent response cache, token
usage and cost, and the environment-variable key.

A backend subclasses `ApiModel` and says how a Request becomes a JSON payload (`payload`) and how a
payload is sent (`send`, a coroutine that returns a `Reply` or raises `CallError`). Everything else
lives here: requests run on one background asyncio loop (shared by every thread that calls the
model, so one concurrency limit holds for all of them), each attempt under a slot of an AIMD limit
(cut by 10% on a 429, grown by one per window of successes), a rate-limited request retried after its
`Retry-After`, other failed attempts retried with exponential backoff and full jitter, and answered
payloads kept in sqlite so a re-run or `--resume` asks the API nothing it has answered before.
Failures are not cached.
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import json
import os
import random
import sqlite3
import threading
import time
from abc import abstractmethod
from collections import Counter
from collections.abc import Coroutine
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from PIL import Image

from fastmmeval.errors import ConfigError
from fastmmeval.models.base import Model
from fastmmeval.models.concurrency_limit import AdaptiveLimit
from fastmmeval.models.vllm_backend import to_vllm_chat
from fastmmeval.protocol import ImagePart, Message, Request, Response

T = TypeVar("T")
# Longest wait honored from a Retry-After header; a server asking for more is retried after this.
MAX_RETRY_AFTER_S = 120.0


@dataclass
class ApiArgs:
    """`--model_args` every API backend takes.

    model: the model name the API knows (required).
    api_key_env: the NAME of the environment variable holding the key (the key itself is never
        passed on the command line, logged, cached or written anywhere).
    system: a system instruction put before each request's own (if any).
    temperature: overrides the task's temperature (the task's is 0, greedy, unless it says otherwise).
    max_tokens: overrides the task's `max_new_tokens` (0: the task's).
    max_image_side: images are shrunk (aspect kept) so their longer side is at most this (0: as is).
    max_concurrency: the most requests in flight; the limit adapts below it on 429s.
    timeout: seconds one attempt may take before it is abandoned and retried.
    max_retries: retries after the first attempt before the request is recorded as failed.
    backoff: base seconds of the exponential backoff (attempt k waits up to backoff * 2**k, jittered).
    cache_dir: where the sqlite response cache lives ("": $FASTMMEVAL_CACHE/api or
        ~/.cache/fastmmeval/api; "off": no cache).
    price_in, price_out: USD per 1M input / output tokens, for the cost in results.json.
    price_table: a JSON file {"<model>": {"in": USD per 1M, "out": USD per 1M}} (instead of the two above).
    """

    model: str
    api_key_env: str = ""
    system: str = ""
    temperature: float | None = None
    max_tokens: int = 0
    max_image_side: int = 1024
    max_concurrency: int = 32
    timeout: float = 60.0
    max_retries: int = 5
    backoff: float = 0.5
    cache_dir: str = ""
    price_in: float = 0.0
    price_out: float = 0.0
    price_table: str = ""


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


def shrink(image: Image.Image, max_side: int) -> Image.Image:
    """`image` scaled down (aspect kept) so its longer side is at most `max_side` (0: unchanged)."""
    if max_side <= 0 or max(image.size) <= max_side:
        return image
    scale = max_side / max(image.size)
    return image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))), Image.LANCZOS)


def openai_messages(request: Request, system: str, max_image_side: int) -> list[dict[str, Any]]:
    """The request as OpenAI chat messages: `system` (if any) first, images shrunk to
    `max_image_side` as PNG data URLs in `image_url` parts."""
    messages = tuple(
        Message(m.role, tuple(ImagePart(shrink(p.image, max_image_side), p.ref) if isinstance(p, ImagePart) else p
                              for p in m.content))
        for m in request.messages
    )
    chat = to_vllm_chat(Request(request.id, request.kind, messages))
    return ([{"role": "system", "content": system}] if system else []) + chat


class ResponseCache:
    """Answered payloads in a sqlite file, keyed by the hash of (backend, payload); safe to share
    between threads and processes."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        # A commit survives a killed process without an fsync per reply; a power cut may lose the last few
        # replies, which only costs asking the API again.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, reply TEXT NOT NULL, at REAL)")
        self._db.commit()

    @staticmethod
    def key(backend: str, payload: dict[str, Any]) -> str:
        """The content hash a payload is cached under."""
        blob = json.dumps({"backend": backend, "payload": payload}, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def get(self, key: str) -> Reply | None:
        """The cached reply, if any."""
        with self._lock:
            row = self._db.execute("SELECT reply FROM replies WHERE key = ?", (key,)).fetchone()
        return Reply(**json.loads(row[0])) if row else None

    def put(self, key: str, reply: Reply) -> None:
        """Keep a successful reply."""
        with self._lock:
            row = (key, json.dumps(asdict(reply)), time.time())
            self._db.execute("INSERT OR REPLACE INTO replies VALUES (?, ?, ?)", row)
            self._db.commit()


def default_cache_dir() -> Path:
    """$FASTMMEVAL_CACHE/api, or ~/.cache/fastmmeval/api."""
    return Path(os.environ.get("FASTMMEVAL_CACHE", Path.home() / ".cache" / "fastmmeval")) / "api"


class _Loop:
    """One asyncio loop on a daemon thread; coroutines from any thread run on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="api-client", daemon=True).start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()


def read_key(env: str, where: str) -> str:
    """The key held by environment variable `env`; a ConfigError naming the variable when unset."""
    key = os.environ.get(env, "")
    if not key:
        raise ConfigError(f"{where}: environment variable {env} (api_key_env) is not set; it must hold the API key")
    return key


def model_prices(args: ApiArgs, where: str) -> tuple[float, float]:
    """USD per 1M (input, output) tokens from `price_table` or `price_in`/`price_out`."""
    if not args.price_table:
        return args.price_in, args.price_out
    path = Path(args.price_table)
    try:
        table = json.loads(path.read_text())
        entry = table[args.model]
        return float(entry["in"]), float(entry["out"])
    except OSError as e:
        raise ConfigError(f"{where}: price_table {path}: cannot read it ({e.strerror})") from None
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ConfigError(
            f"{where}: price_table {path}: needs valid JSON with {{{args.model!r}: {{\"in\": USD, \"out\": USD}}}}"
        ) from None


class ApiModel(Model):
    """A backend that answers each Request with calls to a remote API (see the module docstring)."""

    args: ApiArgs

    def __init__(self, args: ApiArgs) -> None:
        where = f"--model_args for model {self.name!r}"
        least = {"max_concurrency": 1, "max_image_side": 0, "max_tokens": 0, "max_retries": 0, "backoff": 0}
        for name, bound in least.items():
            if getattr(args, name) < bound:
                raise ConfigError(f"{where}: {name} must be >= {bound}, got {getattr(args, name)}")
        if args.timeout <= 0:
            raise ConfigError(f"{where}: timeout must be > 0 seconds, got {args.timeout}")
        self.args = args
        self._key = read_key(args.api_key_env, where)
        self.prices = model_prices(args, where)
        self.cache = None if args.cache_dir == "off" else ResponseCache(
            Path(args.cache_dir or default_cache_dir()) / "replies.sqlite"
        )
        self.limit = AdaptiveLimit(args.max_concurrency)
        self._loop = _Loop()
        self._payloads: dict[str, tuple[Request, dict[str, Any]]] = {}
        self._rng = random.Random()
        self._counts = dict.fromkeys(
            ("requests", "cache_hits", "api_calls", "retries", "rate_limited", "failed", "prompt_tokens",
             "completion_tokens"), 0,
        )
        self._attempt_errors: Counter[str] = Counter()
        self._counts_lock = threading.Lock()

    @abstractmethod
    def payload(self, request: Request) -> dict[str, Any]:
        """What is sent for `request`, as JSON-able data; also what it is cached under."""

    @abstractmethod
    async def send(self, client: Any, payload: dict[str, Any]) -> Reply:
        """One attempt at `payload` through `client`; raises CallError when it fails."""

    @abstractmethod
    def client(self) -> Any:
        """A client for one batch of calls (made and closed on the background loop)."""

    async def close_client(self, client: Any) -> None:
        """Release a client made by `client`."""
        await client.close()

    def redact(self, text: str) -> str:
        """`text` with the key (should a server echo it) masked."""
        return text.replace(self._key, "***") if self._key else text

    def prepare(self, request: Request) -> None:
        """Encode the request's payload (images to data URLs) ahead of its batch."""
        self._payloads[request.id] = (request, self.payload(request))

    def generate(self, requests: list[Request]) -> list[Response]:
        """One Response per request: the API's text, or the reason it failed after all retries."""
        return self._answer(requests)

    def loglikelihood(self, requests: list[Request]) -> list[Response]:
        """One Response with per-continuation log-probabilities per request, where the API offers them."""
        return self._answer(requests)

    def _prepared(self, request: Request) -> dict[str, Any]:
        made = self._payloads.pop(request.id, None)
        return made[1] if made is not None and made[0] is request else self.payload(request)

    def _answer(self, requests: list[Request]) -> list[Response]:
        """Cached replies first; the other payloads are sent, identical ones once (with the cache
        off, every request is a call of its own)."""
        payloads = [self._prepared(r) for r in requests]
        keys = [ResponseCache.key(self.name, p) + ("" if self.cache else f"#{i}") for i, p in enumerate(payloads)]
        cached = {k: reply for k in keys if self.cache and (reply := self.cache.get(k)) is not None}
        missing = {k: p for k, p in zip(keys, payloads, strict=True) if k not in cached}
        self._count(requests=len(requests), cache_hits=sum(k in cached for k in keys))
        answers: dict[str, Reply | str] = dict(cached)
        if missing:
            outcomes = self._loop.run(self._run_all(list(missing.values())))
            for key, outcome in zip(missing, outcomes, strict=True):
                answers[key] = outcome.reason if isinstance(outcome, CallError) else outcome
                if isinstance(outcome, Reply) and self.cache:
                    self.cache.put(key, outcome)
            fatal = [o.reason for o in outcomes if isinstance(o, CallError) and o.fatal]
            if fatal:
                raise ConfigError(f"model {self.name!r}: {fatal[0]}")
        return [_response(r.id, answers[k]) for r, k in zip(requests, keys, strict=True)]

    async def _run_all(self, payloads: list[dict[str, Any]]) -> list[Reply | CallError]:
        client = self.client()
        try:
            return await asyncio.gather(*(self._with_retries(client, p) for p in payloads))
        finally:
            await self.close_client(client)

    async def _with_retries(self, client: Any, payload: dict[str, Any]) -> Reply | CallError:
        for attempt in range(self.args.max_retries + 1):
            async with self.limit.slot() as admitted_at:
                self._count(api_calls=1)
                try:
                    reply = await asyncio.wait_for(self.send(client, payload), self.args.timeout)
                except asyncio.TimeoutError:
                    error = CallError("timeout", f"no reply within {self.args.timeout:g} s (timeout)", retry=True)
                except CallError as e:
                    error = e
                else:
                    self.limit.succeeded(admitted_at)
                    self._count(prompt_tokens=reply.usage.get("prompt_tokens", 0),
                                completion_tokens=reply.usage.get("completion_tokens", 0))
                    return reply
            error.reason = self.redact(error.reason)
            with self._counts_lock:
                self._attempt_errors[error.kind] += 1
            if error.rate_limited:
                self._count(rate_limited=1)
                self.limit.rate_limited(admitted_at, error.retry_after)
            if not error.retry or attempt == self.args.max_retries:
                break
            self._count(retries=1)
            if error.retry_after is not None:
                delay = error.retry_after * (1 + 0.1 * self._rng.random())
            else:
                delay = self._rng.uniform(0, min(MAX_RETRY_AFTER_S, self.args.backoff * 2**attempt))
            await asyncio.sleep(delay)
        self._count(failed=1)
        tries = f"after {attempt + 1} attempt{'s' if attempt else ''}"
        error.reason = f"{self.name} {tries}: {error.reason}"
        return error

    def _count(self, **amounts: int) -> None:
        with self._counts_lock:
            for name, amount in amounts.items():
                self._counts[name] += amount

    def default_batch_size(self) -> int:
        """Requests run concurrently only within a call: enough of them to keep `max_concurrency` busy."""
        return 4 * self.args.max_concurrency

    def usage(self) -> dict[str, Any]:
        """Requests, cache hits, API calls, retries, 429s, failures, failed attempts by kind and
        tokens used by this process; `cost_usd` for the tokens billed when prices are given."""
        with self._counts_lock:
            out: dict[str, Any] = dict(self._counts)
            out["attempt_errors"] = dict(sorted(self._attempt_errors.items()))
        price_in, price_out = self.prices
        if price_in or price_out:
            out["cost_usd"] = round((out["prompt_tokens"] * price_in + out["completion_tokens"] * price_out) / 1e6, 6)
        return out

    def fingerprint(self) -> dict[str, Any]:
        """Backend, model and the settings that change answers (never the key)."""
        a = self.args
        return {"backend": self.name, "model": a.model, "system": a.system, "temperature": a.temperature,
                "max_tokens": a.max_tokens, "max_image_side": a.max_image_side}


def _response(request_id: str, reply: Reply | str) -> Response:
    if isinstance(reply, Reply):
        return Response(request_id, text=reply.text, logprobs=reply.logprobs, is_greedy=reply.is_greedy,
                        usage=dict(reply.usage))
    return Response(request_id, error=reply)
