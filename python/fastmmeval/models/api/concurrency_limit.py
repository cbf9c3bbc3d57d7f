"""The concurrency limit an API backend keeps under a server's quota (AIMD on 429s)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

# A 429 cuts the concurrency limit to this share. Gentler than TCP's 1/2: a rate-limited request
# waits out its Retry-After without holding a slot, so an extra 429 is cheap while an idle slot is
# not (bench/bench_api.py, 500 requests, 429 above 16 in flight: 1/2 -> 12.6 s, 0.8 -> ~11 s,
# 0.9 -> ~10 s, 0.95 -> ~11.5 s).
DECREASE = 0.9


class AdaptiveLimit:
    """An AIMD concurrency limit between 1 and `ceiling`, used from one asyncio loop.

    A 429 lowers the limit to the number of requests the server was still serving when it refused
    (the concurrency it accepts), but by at most `DECREASE` of itself, once per window: only a request
    admitted after the last cut can cut it again, so a burst of 429s from one window counts once. Each
    success adds 1/limit (about +1 per window of successes). Sitting one above a concurrency quota costs an
    instant 429 now and then; sitting below it costs throughput, so the cut stops at what the server took.

    Near the end of the work, once the server has refused any request, the limit neither grows nor is
    used to its last slot: a request refused then would be retried only after its Retry-After, when the
    others are done and the run waits for it alone (bench/bench_api.py: the last two of 500 requests,
    refused at the quota's edge, added 0.7 s to a 9.8 s run). "Near the end" is fewer requests waiting
    than will start within a Retry-After: the limit x (1 + Retry-After / the time a request holds a slot)."""

    def __init__(self, ceiling: int) -> None:
        self.ceiling = ceiling
        self.limit = float(ceiling)
        self.in_flight = 0
        self.waiting = 0
        self.last_cut = 0.0
        self.retry_after = 0.0  # of the last 429
        self.hold_s = 0.0  # moving average of the time a successful request held its slot
        self._changed: asyncio.Condition | None = None

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[float]:
        """Hold one of the limit's slots; yields the time the slot was granted."""
        changed = self._changed = self._changed or asyncio.Condition()
        async with changed:
            self.waiting += 1
            try:
                await changed.wait_for(lambda: self.in_flight < self.usable())
            finally:  # also when the wait is cancelled
                self.waiting -= 1
            self.in_flight += 1
        try:
            yield time.monotonic()
        finally:
            async with changed:
                self.in_flight -= 1
                changed.notify(max(1, self.usable() - self.in_flight))  # wake only as many as may start

    def ending(self) -> bool:
        """Whether the server has refused a request and fewer requests wait than will start before a
        request refused now could be retried."""
        windows = 1.0 + (self.retry_after / self.hold_s if self.hold_s > 0 else 0.0)
        return self.last_cut > 0 and self.waiting < int(self.limit) * windows

    def usable(self) -> int:
        """Slots that may be in use now: the limit, one less near the end of the work."""
        return max(1, int(self.limit) - self.ending())

    def succeeded(self, admitted_at: float | None = None) -> None:
        """Additive increase, except near the end of the work; a request admitted at `admitted_at`
        updates the time requests hold a slot."""
        if admitted_at is not None:
            held = time.monotonic() - admitted_at
            self.hold_s = held if self.hold_s == 0 else 0.9 * self.hold_s + 0.1 * held
        if not self.ending():
            self.limit = min(float(self.ceiling), self.limit + 1.0 / self.limit)

    def rate_limited(self, admitted_at: float, retry_after: float | None = None) -> None:
        """Decrease towards the concurrency the server accepted, once per window."""
        self.retry_after = retry_after or 0.0
        if admitted_at >= self.last_cut:
            self.limit = max(1.0, self.limit * DECREASE, min(self.limit, float(self.in_flight)))
            self.last_cut = time.monotonic()
