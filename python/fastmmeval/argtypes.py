"""argparse `type=` checkers for flag values: a value out of range is refused as a usage error (exit 2,
one line naming the flag) before any model or data loads. Every subcommand's numeric flags use these."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

SEED_MAX = 2**32 - 1  # numpy's seeds are 32-bit


def int_range(low: int | None = None, high: int | None = None) -> Callable[[str], int]:
    """A checker for an integer in [low, high] (None: unbounded on that side)."""

    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if (low is not None and value < low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {_bounds(low, high)}, got {value}")
        return value

    check.__name__ = "integer"  # argparse names the type in its message for a ValueError
    check.bounds = (low, high, False)  # type: ignore[attr-defined]  (read by the tests of every flag)
    return check


def float_range(
    low: float | None = None, high: float | None = None, *, low_open: bool = False
) -> Callable[[str], float]:
    """A checker for a finite number in [low, high] ((low, high] with `low_open`; None: unbounded)."""

    def check(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        too_low = low is not None and (value <= low if low_open else value < low)
        if not math.isfinite(value) or too_low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be a finite number {_bounds(low, high, low_open)}, got {text}")
        return value

    check.__name__ = "number"
    check.bounds = (low, high, low_open)  # type: ignore[attr-defined]
    return check


def _bounds(low: float | None, high: float | None, low_open: bool = False) -> str:
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low}, {high}]"
    if low is not None:
        return f"{'>' if low_open else '>='} {low}"
    return f"<= {high}" if high is not None else "any"


positive_int = int_range(1)
non_negative_int = int_range(0)
seed_int = int_range(0, SEED_MAX)
port_int = int_range(0, 65535)
positive_float = float_range(0.0, low_open=True)
non_negative_float = float_range(0.0)
unit_float = float_range(0.0, 1.0)


def name_list(text: str) -> str:
    """A comma-separated list of names with at least one name (the text itself is kept)."""
    if not any(part.strip() for part in text.split(",")):
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return text
