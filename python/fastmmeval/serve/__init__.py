"""An OpenAI-compatible HTTP server over fastmmeval models.

The API: `start_server(model, host, port, ...)` serves a loaded model in a background thread and returns a
`ServerHandle` (its `url`, `wait()`, `stop()`)."""

from fastmmeval.util import lazy_exports

__all__ = ["Server", "ServerHandle", "start_server"]
# Every `fastmmeval` command imports `serve.cli`, and with it this package: aiohttp is imported on first use.
__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "app"))
