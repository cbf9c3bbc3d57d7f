"""Values made from a PIL image (its PNG data URL, a shrunk copy), kept while the image lives, so an
image sent in many requests (a page's screenshot, asked about by every stage of the live pipeline) is
encoded once. Keyed by the image object's identity: a Request's images are its content and are never
changed after it is made."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from PIL import Image

V = TypeVar("V")


class ImageMemo(Generic[V]):
    """`get(image, key, make)`: `make()` the first time for this image object and `key`, then the kept
    value until the image is garbage collected."""

    def __init__(self) -> None:
        self._values: dict[tuple[int, Hashable], tuple[weakref.ref[Image.Image], V]] = {}
        self._lock = threading.Lock()

    def get(self, image: Image.Image, key: Hashable, make: Callable[[], V]) -> V:
        """The value for (`image`, `key`), made by `make` when there is none."""
        slot = (id(image), key)
        with self._lock:
            hit = self._values.get(slot)
        if hit is not None and hit[0]() is image:
            return hit[1]
        value = make()
        with self._lock:
            self._values[slot] = (weakref.ref(image, lambda ref: self._forget(slot, ref)), value)
        return value

    def _forget(self, slot: tuple[int, Hashable], ref: weakref.ref[Image.Image]) -> None:
        with self._lock:
            if slot in self._values and self._values[slot][0] is ref:  # not a newer image at the same address
                del self._values[slot]

    def __len__(self) -> int:
        with self._lock:
            return len(self._values)
