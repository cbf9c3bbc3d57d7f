"""`ordered_map`: results in input order, computed on a pool a bounded number of items ahead."""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from fastmmeval.pools import ordered_map


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
