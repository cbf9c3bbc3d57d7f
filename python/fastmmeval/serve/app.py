"""The OpenAI-compatible HTTP server (aiohttp) over a fastmmeval Model.

Endpoints: `GET /v1/models`, `POST /v1/chat/completions`, `POST /v1/loglikelihood` (our extension
for multiple-choice scoring) and `GET /health`. Errors use OpenAI's error JSON: 400 for a malformed
request, 401 for a missing or wrong key (when the server has one), 404 for an unknown model or path,
408 for a body that did not arrive in time, 413 for a body over the limit (see `limits`), 422 when the
model could not answer this request (the reason is in the message; retrying will not help), 503 while
shutting down or too busy (bodies in flight over their budget), 500 for anything else.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_urldispatcher import _default_expect_handler

from fastmmeval.errors import ConfigError
from fastmmeval.models.base import Model
from fastmmeval.models.structured import structured_rounds
from fastmmeval.protocol import Request, Response
from fastmmeval.serve import openai_format as fmt
from fastmmeval.serve.batcher import Batcher, make_batcher
from fastmmeval.serve.limits import LINGER_S, MAX_HEADERS, Limits, check_exposure

log = logging.getLogger(__name__)

PREPARE_WORKERS = 2
STOP_GRACE_S = 2.0  # how long open connections may stay after the server is told to stop
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Build = Callable[[dict[str, Any]], Request]


class Server:
    """The HTTP handlers over one model: parse and prepare off the event loop, submit to the batcher."""

    def __init__(self, model: Model, served_name: str, batcher: Batcher, default_max_tokens: int,
                 api_key: str | None = None, limits: Limits | None = None) -> None:
        self.model = model
        self._api_key = api_key
        self.limits = limits or Limits()
        self.served_name = served_name
        self.batcher = batcher
        self.default_max_tokens = default_max_tokens
        self.created = int(time.time())
        self.pool = ThreadPoolExecutor(PREPARE_WORKERS, thread_name_prefix="fastmmeval-serve-prepare")
        self._inflight_bytes = 0

    def app(self) -> web.Application:
        """The aiohttp application with every route."""
        app = web.Application(client_max_size=self.limits.max_body_bytes,
                              middlewares=[_errors_as_json, self._check_key])
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/chat/completions", self.chat_completions, expect_handler=self._expect)
        app.router.add_post("/v1/loglikelihood", self.loglikelihood, expect_handler=self._expect)
        return app

    @web.middleware
    async def _check_key(self, http: web.Request, handler: Handler) -> web.StreamResponse:
        """Refuse /v1 requests without `Authorization: Bearer <key>` when the server has a key."""
        if self._api_key is not None and http.path.startswith("/v1/"):
            scheme, _, sent = http.headers.get("Authorization", "").strip().partition(" ")
            # surrogateescape: header bytes that are not UTF-8 are a wrong key, not an encoding error.
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                    sent.strip().encode("utf-8", "surrogateescape"), self._api_key.encode()):
                raise fmt.RequestError("missing or wrong API key (Authorization: Bearer ...)", status=401,
                                       code="invalid_api_key")
        return await handler(http)

    async def health(self, _: web.Request) -> web.Response:
        """200 while the server is up."""
        return web.json_response({"status": "ok"})

    async def models(self, _: web.Request) -> web.Response:
        """The one served model, as OpenAI's model list."""
        return web.json_response({"object": "list", "data": [
            {"id": self.served_name, "object": "model", "created": self.created, "owned_by": "fastmmeval"}]})

    async def chat_completions(self, http: web.Request) -> web.Response:
        """A chat completion (n=1) of the posted messages."""
        with self._inflight(http):
            request = await self._parse(http, lambda body: fmt.chat_request(
                body, self.default_max_tokens, self.limits.max_image_pixels))
            response = await (self._answer_structured(request) if request.json_schema else self._answer(request))
            return web.json_response(fmt.chat_completion(request, response, self.served_name))

    async def loglikelihood(self, http: web.Request) -> web.Response:
        """Summed log-probabilities and greediness of each posted continuation after the messages."""
        with self._inflight(http):
            request = await self._parse(
                http, lambda body: fmt.loglikelihood_request(body, self.limits.max_image_pixels))
            response = await self._answer(request)
            return web.json_response(fmt.loglikelihood_result(request, response, self.served_name))

    @contextmanager
    def _inflight(self, http: web.Request) -> Iterator[None]:
        """Count the request's body against the bytes all requests in flight may hold (on the event loop
        only, so no lock); over it, 503 at once with a Retry-After."""
        self._check_declared_size(http)
        size = http.content_length if http.content_length is not None else self.limits.max_body_bytes
        if self._inflight_bytes + size > self.limits.max_inflight_bytes:
            raise fmt.RequestError(f"the server is busy: requests in flight hold {self._inflight_bytes} bytes of "
                                   f"their {self.limits.max_inflight_bytes}; retry later", status=503,
                                   type_="server_error", code="server_busy")
        self._inflight_bytes += size
        try:
            yield
        finally:
            self._inflight_bytes -= size

    async def _parse(self, http: web.Request, build: Build) -> Request:
        """The Request `build` makes of the posted JSON object (checked to name the served model);
        JSON and images are decoded off the event loop."""
        raw = await self._read(http)

        def parse() -> Request:
            body = fmt.parse_body(raw)
            fmt.check_model(body, self.served_name)
            return build(body)

        return await asyncio.get_running_loop().run_in_executor(self.pool, parse)

    def _check_declared_size(self, http: web.Request) -> None:
        if http.content_length is not None and http.content_length > self.limits.max_body_bytes:
            raise self._too_large()

    def _too_large(self) -> fmt.RequestError:
        return fmt.RequestError(f"the request body is larger than {self.limits.max_body_bytes} bytes", status=413)

    async def _expect(self, http: web.Request) -> web.StreamResponse | None:
        """`Expect: 100-continue`: a body declared over the limit gets its 413 instead of the go-ahead."""
        try:
            self._check_declared_size(http)
        except fmt.RequestError as e:
            return _error_response(e)
        return await _default_expect_handler(http)

    async def _read(self, http: web.Request) -> bytes:
        """The body (its declared size already checked by `_inflight`): refused when it grows past the
        limit (chunked) or does not arrive within the read timeout."""
        try:
            return await asyncio.wait_for(http.read(), self.limits.read_timeout_s)
        except web.HTTPRequestEntityTooLarge:
            raise self._too_large() from None
        except TimeoutError:
            raise fmt.RequestError(f"the request body did not arrive within {self.limits.read_timeout_s:g} s",
                                   status=408, code="timeout") from None

    async def _answer(self, request: Request) -> Response:
        """The model's Response to `request`, computed together with the other requests in flight."""
        return _answered(await self._respond(request))

    async def _answer_structured(self, request: Request) -> Response:
        """The reply in `request`'s JSON schema (`models.structured`): each round's value requests are
        answered together with the other requests in flight."""
        rounds = structured_rounds(request)
        responses: list[Response] | None = None
        try:
            while True:
                responses = list(await asyncio.gather(*map(self._respond, rounds.send(responses))))
        except StopIteration as done:
            return _answered(done.value)

    async def _respond(self, request: Request) -> Response:
        """The model's Response to `request`, failed or not."""
        loop = asyncio.get_running_loop()
        prepared = await loop.run_in_executor(self.pool, self.batcher.prepare, request)
        try:
            return await asyncio.wrap_future(self.batcher.submit(request, prepared))
        except RuntimeError as e:
            raise fmt.RequestError(str(e), status=503, type_="server_error", code="shutting_down") from None


def _answered(response: Response) -> Response:
    """`response`, or the 422 its error makes."""
    if response.error is not None:
        raise fmt.RequestError(response.error, status=422, type_="invalid_request_error", code="model_failed")
    return response


class _ConnectionLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's per-connection logger: malformed HTTP from a client (a header over the limits, a bad
    request line) is the client's error, already answered with a 400: one debug line, no traceback."""

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        if isinstance(exc_info, HttpProcessingError):
            self.debug(f"{msg}: %s", *args, str(exc_info).replace("\n", " "), **kwargs)
        else:
            super().exception(msg, *args, exc_info=exc_info, **kwargs)


def _error_response(error: fmt.RequestError) -> web.Response:
    """The error's OpenAI JSON answer."""
    busy = error.code == "server_busy"
    response = web.json_response(error.body(), status=error.status, headers={"Retry-After": "1"} if busy else None)
    if error.status in (408, 413) or busy:  # the body is not read (all): this connection serves no more requests
        response.force_close()
    return response


@web.middleware
async def _errors_as_json(http: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error in OpenAI's error JSON shape."""
    try:
        return await handler(http)
    except fmt.RequestError as e:
        return _error_response(e)
    except web.HTTPException as e:
        code = "not_found" if e.status == 404 else None
        error = fmt.RequestError(f"{http.method} {http.path}: {e.reason}", status=e.status, code=code)
        return web.json_response(error.body(), status=e.status)
    except Exception as e:
        log.exception("serve: %s %s failed", http.method, http.path)
        error = fmt.RequestError(f"internal error: {type(e).__name__}", status=500, type_="server_error")
        return web.json_response(error.body(), status=500)


class ServerHandle:
    """A running server: `url` (ending in /v1) for OpenAI clients, `stop()`; a context manager."""

    def __init__(self, server: Server, sock: socket.socket) -> None:
        self.server = server
        host, port = sock.getsockname()[:2]
        self.host, self.port = host, port
        self.url = f"http://{host if ':' not in host else f'[{host}]'}:{port}/v1"
        self._loop = asyncio.new_event_loop()
        # handler_cancellation: a client that disconnects cancels its handler, and so its request.
        # shutdown_timeout: on stop, open connections (a client's keep-alive one, say) are closed after
        # STOP_GRACE_S, not after aiohttp's default 60 s.
        # keepalive_timeout: also runs from a connection's start while its headers are incomplete, so
        # headers that stall are dropped after the read timeout, as are idle connections.
        self._runner = web.AppRunner(server.app(), access_log=None, handler_cancellation=True,
                                     shutdown_timeout=STOP_GRACE_S, keepalive_timeout=server.limits.read_timeout_s,
                                     max_headers=MAX_HEADERS, lingering_time=LINGER_S,
                                     logger=_ConnectionLog(log, {}))
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, args=(sock,), name="fastmmeval-serve-http", daemon=True)
        self._thread.start()
        self._started.wait()
        if self._error is not None:
            raise ConfigError(f"serve: cannot start the HTTP server: {self._error}")

    def _serve(self, sock: socket.socket) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._runner.setup())
            self._loop.run_until_complete(web.SockSite(self._runner, sock).start())
        except Exception as e:
            self._error = e
            self._started.set()
            return
        self._started.set()
        self._loop.run_forever()

    @property
    def batches(self) -> list[int]:
        """How many requests the model took together, each time it took some."""
        return self.server.batcher.batches

    def wait(self) -> None:
        """Block until the server stops (Ctrl-C raises KeyboardInterrupt here)."""
        while self._thread.is_alive():
            self._thread.join(0.5)

    def stop(self) -> None:
        """Fail requests still waiting, close the HTTP server and stop the model's worker."""
        if not self._thread.is_alive():
            return
        self.server.batcher.stop()
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        self.server.pool.shutdown()

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_server(model: Model, host: str = "127.0.0.1", port: int = 0, served_name: str | None = None, *,
                 max_batch: int = 32, batch_window_s: float = 0.005, default_max_tokens: int = 256,
                 api_key: str | None = None, limits: Limits | None = None) -> ServerHandle:
    """Serve `model` over OpenAI's HTTP API from background threads; port 0 picks a free port.
    Until `stop()`, the model belongs to the server: nothing else may call it.

    `served_name` is the model id clients must send (default: the backend's name). Requests in
    flight are answered together (see `fastmmeval.serve.batcher`): at most `max_batch` taken at
    once, collected for `batch_window_s` by backends without a continuous-batching engine.
    `default_max_tokens` applies when a request sets no max_tokens. With `api_key`, /v1 requests
    must carry it as `Authorization: Bearer <key>`; without one, only a loopback `host` is
    allowed. `limits`: what one request may carry (default: `Limits()`)."""
    if max_batch < 1 or batch_window_s < 0 or default_max_tokens < 0:
        raise ConfigError("serve: max_batch must be >= 1, batch_window_s and default_max_tokens >= 0")
    check_exposure(host, api_key is not None)
    try:
        sock = socket.create_server((host, port))
    except OSError as e:
        raise ConfigError(f"serve: cannot listen on {host}:{port}: {e.strerror or e}") from None
    batcher = make_batcher(model, max_batch, batch_window_s)
    try:
        server = Server(model, served_name or model.name, batcher, default_max_tokens, api_key, limits)
        return ServerHandle(server, sock)
    except BaseException:
        batcher.stop()
        sock.close()
        raise
