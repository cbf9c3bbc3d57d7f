"""Checks shared by the tests of native functions."""

import sys
import threading
import time
from collections.abc import Callable


def releases_gil(call: Callable[[], object]) -> bool:
    """Whether another Python thread runs while `call` does (`call` should take 10+ ms).

    With a long switch interval a thread that holds the GIL keeps it: the counter can only advance
    during the call if the call lets go of the GIL."""
    ticks = 0
    done = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1

    old = sys.getswitchinterval()
    sys.setswitchinterval(0.5)
    try:
        counter = threading.Thread(target=count)
        counter.start()
        time.sleep(0.01)
        before = ticks
        call()
        during = ticks - before
        done.set()
        counter.join()
    finally:
        sys.setswitchinterval(old)
    return during > 0
