"""Whether the Hugging Face Hub can be used: offline mode asked for, or a quick probe of its address, so a
command that only wants data when it is at hand does not wait out the hub client's retries."""

from __future__ import annotations

import os
import socket
import sys
from urllib.parse import urlsplit

PROBE_TIMEOUT_S = 1.5


def hub_offline() -> bool:
    """Whether offline mode is asked for ($HF_HUB_OFFLINE or $HF_DATASETS_OFFLINE set to a true value)."""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def hub_reachable(timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the hub ($HF_ENDPOINT, default huggingface.co) opens within `timeout_s`."""
    url = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        with socket.create_connection((url.hostname or "huggingface.co", port), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def go_offline() -> None:
    """Switch this process to offline mode, also in hub libraries imported before (they read the setting once)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    for module, names in (("huggingface_hub.constants", ("HF_HUB_OFFLINE",)),
                          ("datasets.config", ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))):
        loaded = sys.modules.get(module)
        for name in names if loaded is not None else ():
            setattr(loaded, name, True)
