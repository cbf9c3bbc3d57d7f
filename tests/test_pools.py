"""`ordered_map`: results in input order, computed on a pool a bounded number of items ahead; `read_ahead`:
an iterator produced on a thread a bounded number of items ahead."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from fastmmeval.pools import ordered_map, read_ahead


def test_results_come_in_order_and_work_stays_a_few_items_ahead() -> None:
    started = 0
    lock = threading.Lock()
    rng = random.Random(0)
    delays = [rng.uniform(0, 0.004) for _ in range(60)]

    def square(x: int) -> int:
        nonlocal started
        with lock:
            started += 1
        time.sleep(delays[x])  # later items often finish first
        return x * x

    got = []
    with ThreadPoolExecutor(4) as pool:
        for y in ordered_map(pool, square, range(60), ahead=5):
            # The item handed over and at most `ahead` after it have been taken up, never more.
            assert started - len(got) <= 5 + 1
            got.append(y)
    assert got == [x * x for x in range(60)]
    with ThreadPoolExecutor(2) as pool:
        assert list(ordered_map(pool, square, [], ahead=3)) == []


def test_read_ahead_yields_in_order_holding_at_most_one_item_beyond_the_consumer() -> None:
    made: list[int] = []

    def items() -> Iterator[int]:
        for i in range(6):
            made.append(i)
            yield i

    seen = []
    for item in read_ahead(items(), ahead=1):
        time.sleep(0.02)  # time for the producer to run ahead if it could
        assert len(made) <= item + 2  # the item held and at most one more
        seen.append(item)
    assert seen == list(range(6))


def test_read_ahead_hands_the_producer_s_error_to_the_consumer_and_stops_when_closed() -> None:
    def failing() -> Iterator[int]:
        yield 1
        raise ValueError("bad shard")

    it = read_ahead(failing())
    assert next(it) == 1
    with pytest.raises(ValueError, match="bad shard"):
        next(it)
    made: list[int] = []
    endless = read_ahead(made.append(i) or i for i in itertools.count())
    assert next(endless) == 0
    endless.close()
    time.sleep(0.05)
    assert len(made) <= 3  # the producer stopped instead of reading on
