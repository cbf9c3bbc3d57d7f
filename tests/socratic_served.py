"""What the socratic end-to-end tests share: `fastmmeval serve` over the embedded socratic model
(SmolLM2-135M reading OCR and image tags), started once per module, the `--model_args` of an `openai`
role talking to it, and the CLI run as a subprocess.

    from socratic_served import fastmmeval, role_args, served_socratic  # noqa: F401  (the `served` fixture)
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from fastmmeval.models import MODELS
from fastmmeval.serve.app import ServerHandle, start_server

KEY_ENV = "FMM_SOCRATIC_KEY"


@pytest.fixture(scope="module", name="served")
def served_socratic() -> Iterator[ServerHandle]:
    """The served socratic model."""
    with start_server(MODELS.get("socratic").from_args({}), served_name="socratic") as server:
        yield server


def role_args(server: ServerHandle) -> str:
    """`--model_args` of a role played by `server`: no response cache, long timeout, never retried."""
    return f"base_url={server.url},model=socratic,api_key_env={KEY_ENV},cache_dir=off,timeout=3000,max_retries=0"


def fastmmeval(*args: str) -> subprocess.CompletedProcess[str]:
    """`fastmmeval ARGS` in a subprocess (an hour at most), which must succeed."""
    run = subprocess.run([sys.executable, "-m", "fastmmeval", *args], env=os.environ | {KEY_ENV: "local"},
                         capture_output=True, text=True, timeout=3600)
    assert run.returncode == 0, run.stderr[-2000:]
    return run
