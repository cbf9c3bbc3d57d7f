"""`fastmmeval serve`: serve a model over OpenAI's HTTP API until interrupted."""

from __future__ import annotations

import argparse
import os
import signal
from typing import Any

from rich.console import Console

from fastmmeval.argtypes import non_negative_float, port_int, positive_float, positive_int
from fastmmeval.errors import ConfigError
from fastmmeval.serve.limits import MAX_INFLIGHT_BYTES, READ_TIMEOUT_S, SERVE_MAX_PIXELS, Limits, check_exposure


def add_parser(sub: Any) -> None:
    """Add `serve`."""
    p = sub.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API")
    p.add_argument("--model", required=True, help="backend name (see `fastmmeval models`)")
    p.add_argument("--model_args", default="", help="k=v,k2=v2 passed to the backend")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    p.add_argument("--port", type=port_int, default=8000, help="port to listen on (0: any free port)")
    p.add_argument("--served_model_name", default=None, help="model id clients send (default: the backend name)")
    p.add_argument("--max_batch", type=positive_int, default=32, help="most requests handed to the model at once")
    p.add_argument("--batch_window_ms", type=non_negative_float, default=5.0,
                   help="backends without an engine: how long to collect requests into one batch")
    p.add_argument("--max_tokens", type=positive_int, default=256,
                   help="reply length when a request sets no max_tokens")
    p.add_argument("--api_key_env", default=None,
                   help="NAME of an environment variable holding a key that clients must send (default: no key; "
                        "then only a loopback --host is allowed)")
    p.add_argument("--max_image_pixels", type=positive_int, default=SERVE_MAX_PIXELS,
                   help="an image declaring more pixels (or a request's images together) is refused (400)")
    p.add_argument("--read_timeout_s", type=positive_float, default=READ_TIMEOUT_S,
                   help="headers, then the body, must arrive within this many seconds")
    p.add_argument("--max_inflight_mb", type=positive_int, default=MAX_INFLIGHT_BYTES // 2**20,
                   help="MiB of request bodies all requests in flight may hold together; beyond, 503 at once "
                        "(a body without a declared length counts as the 64 MiB limit)")


def main(args: argparse.Namespace) -> int:
    """Check the flags, load the model, serve it, and stop cleanly on Ctrl-C (SIGINT) or SIGTERM."""
    from fastmmeval.models import MODELS, parse_model_args
    from fastmmeval.serve.app import start_server

    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise ConfigError(f"--api_key_env: the environment variable {args.api_key_env} is not set or empty")
    # Everything start_server would refuse is refused before the model takes its time to load.
    check_exposure(args.host, api_key is not None)
    limits = Limits(max_image_pixels=args.max_image_pixels, read_timeout_s=args.read_timeout_s,
                    max_inflight_bytes=args.max_inflight_mb * 2**20)
    model = MODELS.get(args.model).from_args(parse_model_args(args.model_args))
    handle = start_server(model, args.host, args.port, args.served_model_name, max_batch=args.max_batch,
                          batch_window_s=args.batch_window_ms / 1000, default_max_tokens=args.max_tokens,
                          api_key=api_key, limits=limits)
    # A process started with SIGINT ignored (a background job, or a parent that ignores it) would
    # otherwise never see Ctrl-C; SIGTERM (`kill`) stops it the same way.
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, _interrupt)
    console = Console(stderr=True)
    try:  # Ctrl-C right after the line below is printed still stops the server cleanly
        console.print(f"serving {handle.server.served_name!r} ({args.model}) at {handle.url}  (Ctrl-C stops)")
        handle.wait()
    except KeyboardInterrupt:
        console.print("stopping")
    finally:
        handle.stop()
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
