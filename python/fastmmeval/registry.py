"""One generic name -> object registry for tasks, models, metrics, extractors and sources."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from fastmmeval.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """Named objects of one kind; unknown names fail with the closest known names."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def add(self, name: str, item: T) -> T:
        """Register `item` under `name`; a name can be taken only once."""
        if name in self._items and self._items[name] is not item:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._items[name] = item
        return item

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of `add`."""
        return lambda item: self.add(name, item)

    def get(self, name: str) -> T:
        """The item called `name`, or a ConfigError listing close names."""
        try:
            return self._items[name]
        except KeyError:
            raise ConfigError(self.unknown_message(name)) from None

    def unknown_message(self, name: str) -> str:
        """'unknown <kind> X; did you mean ...' with the closest registered names."""
        close = difflib.get_close_matches(name, self._items, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        return f"unknown {self.kind} {name!r}{hint} (list them with `fastmmeval {self.kind}s`)"

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> list[tuple[str, T]]:
        """(name, item) pairs sorted by name."""
        return sorted(self._items.items())
