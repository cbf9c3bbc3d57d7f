"""kill -9 a pipeline command in the middle of its model calls, for the tests that then rerun it and
check that no call answered before the kill is asked again: `kill_mid_calls` starts the command, kills
it once the scripted server (api_fixtures.FakeAPI) has answered `answered` calls in all, and returns
the hashes of the calls whose answers had surely reached the command's cache by then.

    settled = kill_mid_calls(command, env, llm.server, calls_whole + calls_whole // 2)
    ...rerun...
    assert not settled & {body_hash(b) for _, b, _ in llm.server.calls[before_rerun:]}
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from typing import Any

from api_fixtures import FakeAPI

SETTLED_S = 0.5  # a call answered this long before the kill has surely reached the cache (a commit per answer)


def body_hash(body: dict[str, Any]) -> str:
    """What identifies a call: its request body."""
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def kill_mid_calls(command: Sequence[str], env: dict[str, str], server: FakeAPI, answered: int,
                   timeout_s: float = 120.0) -> set[str]:
    """Run `command`, kill -9 it once `server` has answered `answered` calls (counting earlier ones), and
    return the body hashes of this run's calls answered SETTLED_S before the kill."""
    start = len(server.calls)
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout_s
    while len(server.answered) < answered and time.monotonic() < deadline:
        assert child.poll() is None, child.stderr.read().decode() if child.stderr else ""
        time.sleep(0.01)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    killed_at = time.monotonic()
    return {body_hash(server.calls[n][1]) for at, n in server.answered if n >= start and at < killed_at - SETTLED_S}
