"""Thread-pool helpers shared by the evaluator and the contamination scan."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


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
