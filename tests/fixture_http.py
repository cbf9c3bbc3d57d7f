"""A bounded HTTP fixture server for tests: threaded, on 127.0.0.1 only, answering at most
`max_requests` requests (503 after) and living at most `lifetime_s` seconds. A subclass answers
through `respond`; `redirects` sends a path elsewhere with a 302; `hits` holds (method, Host header,
path) of every request. `offsite_url` is the same server under another host name (localhost), for
allowlist tests.

    class Pages(FixtureServer):
        def respond(self, method, path, params, headers, body):
            return 200, "text/html", b"<p>hi</p>"
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

Reply = tuple[int, str, bytes]  # status, content type, body
MAX_BODY = 1 << 20  # bytes of a request body read at most


class FixtureServer:
    """See the module docstring."""

    def __init__(self, max_requests: int = 500, lifetime_s: float = 300.0) -> None:
        self.hits: list[tuple[str, str, str]] = []
        self.redirects: dict[str, str] = {}  # path -> where a 302 sends it
        self.max_requests = max_requests
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        port = self._server.server_address[1]
        self.base_url = f"http://127.0.0.1:{port}"
        self.offsite_url = f"http://localhost:{port}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self._timer = threading.Timer(lifetime_s, self._server.shutdown)
        self._timer.daemon = True
        self._timer.start()

    def respond(self, method: str, path: str, params: dict[str, str], headers: Any, body: bytes) -> Reply:
        """(status, content type, body) for one request."""
        raise NotImplementedError

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                self._reply("GET", b"")

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                self._reply("POST", self.rfile.read(min(length, MAX_BODY)))

            def _reply(self, method: str, body: bytes) -> None:
                parts = urlsplit(self.path)
                with server._lock:
                    server.hits.append((method, self.headers.get("Host", ""), parts.path))
                    over = len(server.hits) > server.max_requests
                try:
                    if over:
                        self._send(503, "text/plain", b"request budget spent")
                    elif parts.path in server.redirects:
                        self.send_response(302)
                        self.send_header("Location", server.redirects[parts.path])
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                    else:
                        self._send(*server.respond(method, parts.path, dict(parse_qsl(parts.query)), self.headers,
                                                   body))
                except ConnectionError:  # the client went away (a browser context closed mid-request)
                    pass

            def _send(self, status: int, kind: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        return Handler

    def close(self) -> None:
        """Stop serving."""
        self._timer.cancel()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FixtureServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
