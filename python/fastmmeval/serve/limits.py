"""What `fastmmeval serve` accepts from a client, and where it may listen without a key.

Light on purpose: `serve.cli` reads the defaults for its flags from here on every command."""

from __future__ import annotations

import ipaddress
import math
import socket
from dataclasses import dataclass

from fastmmeval.errors import ConfigError

# Data-URL images make large bodies; OpenAI itself accepts up to ~50 MB per request.
MAX_BODY_BYTES = 64 * 2**20
# 4096 x 4096: decodes to 48 MiB of RGB, larger than any model's input side, far below what a 140 KB
# PNG can declare; the library's own cap (64 MP, for files a user chose) is too trusting for clients.
SERVE_MAX_PIXELS = 4096 * 4096
# Headers must arrive within this of the connection opening (or of the previous answer), a body
# within this of its headers: a stalled client holds its connection no longer.
READ_TIMEOUT_S = 60.0
# Request bodies being read, parsed or answered at once, together (a body without a declared length counts
# as the largest allowed): 16 bodies at the limit; beyond it a request gets 503 at once, not more memory.
MAX_INFLIGHT_BYTES = 16 * MAX_BODY_BYTES
# Header fields per request (aiohttp bounds each line and field to 8190 bytes): 512 KiB at most.
MAX_HEADERS = 64
# After refusing a body (413, 408), how long the server reads and discards what the client still
# sends, so the client gets the answer rather than a connection reset.
LINGER_S = 1.0


@dataclass(frozen=True)
class Limits:
    """What one request may carry and how long it may take to arrive; `max_image_pixels` None: no cap."""

    max_body_bytes: int = MAX_BODY_BYTES
    read_timeout_s: float = READ_TIMEOUT_S
    max_image_pixels: int | None = SERVE_MAX_PIXELS
    max_inflight_bytes: int = MAX_INFLIGHT_BYTES

    def __post_init__(self) -> None:
        if self.max_image_pixels is not None and self.max_image_pixels <= 0:
            raise ConfigError(f"serve: --max_image_pixels must be positive, got {self.max_image_pixels}")
        if not 0 < self.read_timeout_s < math.inf:
            raise ConfigError(f"serve: --read_timeout_s must be a positive number, got {self.read_timeout_s}")
        if self.max_body_bytes <= 0:
            raise ConfigError(f"serve: the body limit must be positive, got {self.max_body_bytes}")
        if self.max_inflight_bytes < self.max_body_bytes:
            raise ConfigError(f"serve: --max_inflight_mb must hold at least one body of {self.max_body_bytes} bytes")


def check_exposure(host: str, has_key: bool) -> None:
    """Refuse to listen on `host` without a key unless every address it names is loopback."""
    if not has_key and not _is_loopback(host):
        raise ConfigError(f"serve: --host {host or repr(host)} is not a loopback address, so anyone who reaches it "
                          "could use the model: set --api_key_env NAME (a variable holding the key clients must "
                          "send) or listen on 127.0.0.1")


def _is_loopback(host: str) -> bool:
    if not host:  # "" listens on every interface
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError as e:
        raise ConfigError(f"serve: --host {host}: cannot resolve it: {e.strerror or e}") from None
    return all(ipaddress.ip_address(a.split("%", 1)[0]).is_loopback for a in addresses)
