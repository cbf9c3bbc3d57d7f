"""A scripted local HTTP server for API-backend tests."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

# A script decides each call's answer from its number (0, 1, ...) and JSON body.
Script = Callable[[int, dict[str, Any]], web.Response]


class FakeAPI:
    """A local server on a background thread that records every call and answers per `script`."""

    def __init__(self, script: Script, delay_s: float = 0.0) -> None:
        self.script, self.delay_s = script, delay_s
        self.calls: list[tuple[str, dict[str, Any], CIMultiDict[str]]] = []
        self.answered: list[tuple[float, int]] = []  # (time.monotonic(), call number) as each answer is sent
        self.in_flight = self.max_in_flight = 0
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.port = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result()
        self.url = f"http://127.0.0.1:{self.port}/v1"

    async def _start(self) -> int:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        number = len(self.calls)
        self.calls.append((request.path, body, request.headers.copy()))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay_s)
            return self.script(number, body)
        finally:
            self.in_flight -= 1
            self.answered.append((time.monotonic(), number))

    def __enter__(self) -> FakeAPI:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
