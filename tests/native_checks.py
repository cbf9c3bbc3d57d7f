"""Checks shared by the tests of native functions."""

import sys
import threading
import time
from collections.abc import Callable


def releases_gil(call: Callable[[], object], seconds: float = 0.3) -> bool:
    """Whether another Python thread runs while `call` does (`call` should take 10+ ms; it is
    repeated for at least `seconds`, so a loaded machine still schedules the counter meanwhile).

    With a long switch interval a thread that holds the GIL keeps it: the counter can only advance
    during the calls if they let go of the GIL."""
    ticks = 0
    done = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1

    old = sys.getswitchinterval()
    sys.setswitchinterval(1.0)  # longer than the calls below take together
    try:
        counter = threading.Thread(target=count)
        counter.start()
        time.sleep(0.01)
        before = ticks
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            call()
        during = ticks - before
        done.set()
        counter.join()
    finally:
        sys.setswitchinterval(old)
    return during > 0
