"""`ApiModel`, the base of the API backends: adaptive concurrency, retries, the persistent response
cache (`cache`), token usage and cost (`prices`), and the environment-variable key.

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
import os
import random
import threading
from abc import abstractmethod
from collections import Counter
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from fastmmeval.errors import ConfigError
from fastmmeval.models.api.args import ApiArgs
from fastmmeval.models.api.cache import ResponseCache, default_cache_dir
from fastmmeval.models.api.calls import MAX_RETRY_AFTER_S, CallError, Reply
from fastmmeval.models.api.concurrency_limit import AdaptiveLimit
from fastmmeval.models.api.prices import model_prices
from fastmmeval.models.base import Model
from fastmmeval.protocol import Request, Response

T = TypeVar("T")


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
