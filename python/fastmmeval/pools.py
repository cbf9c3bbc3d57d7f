"""Thread helpers shared by the evaluator and the contamination flows: ordered maps on a pool, reading ahead."""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")
_END = object()


def ordered_map(pool: Executor, fn: Callable[[T], R], items: Iterable[T], ahead: int) -> Iterator[R]:
    """fn of each item, in order, computed on `pool` at most `ahead` items ahead of the consumer."""
    window: deque[Future[R]] = deque()
    pending = iter(items)
    for item in pending:
        window.append(pool.submit(fn, item))
        if len(window) >= ahead:
            break
    while window:
        result = window.popleft().result()
        for item in pending:  # the next one, if any (an item may itself be None)
            window.append(pool.submit(fn, item))
            break
        yield result


def read_ahead(items: Iterable[T], ahead: int = 1) -> Iterator[T]:
    """The items of `items`, produced on a background thread at most `ahead` items beyond the one the
    consumer holds (so at most `ahead + 1` are alive at once); its exceptions reach the consumer. Closing
    the iterator (or an exception in the consumer) stops the producer after the item it is making."""
    slots = threading.Semaphore(ahead + 1)
    ready: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
    stop = threading.Event()

    def produce() -> None:
        source = iter(items)
        try:
            while True:
                slots.acquire()  # before the next item is made, so that no more than ahead + 1 are alive
                if stop.is_set():
                    return
                item = next(source, _END)
                if item is _END:
                    break
                ready.put((True, item))
        except BaseException as e:  # handed to the consumer, which raises it
            ready.put((False, e))
            return
        ready.put((False, None))

    threading.Thread(target=produce, name="read-ahead", daemon=True).start()
    try:
        while True:
            ok, value = ready.get()
            if not ok:
                if value is not None:
                    raise value
                return
            yield value
            slots.release()
    finally:
        stop.set()
        slots.release()  # a producer waiting for a slot wakes and sees `stop`
