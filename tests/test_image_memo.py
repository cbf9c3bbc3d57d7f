"""An image sent in many requests is encoded once: its data URL and shrunk copy are kept while it lives."""

from __future__ import annotations

import gc

from PIL import Image

from fastmmeval.models.api.messages import shrink
from fastmmeval.models.chat_messages import image_data_url
from fastmmeval.models.image_memo import ImageMemo


def test_a_value_is_made_once_per_image_object_and_key_and_forgotten_with_the_image() -> None:
    memo: ImageMemo[str] = ImageMemo()
    made: list[str] = []
    image = Image.new("RGB", (8, 8), "red")

    def make(label: str) -> str:
        made.append(label)
        return label

    assert memo.get(image, "a", lambda: make("a")) == "a"
    assert memo.get(image, "a", lambda: make("again")) == "a"
    assert memo.get(image, "b", lambda: make("b")) == "b"
    twin = Image.new("RGB", (8, 8), "red")  # equal pixels, another object: its own entry
    assert memo.get(twin, "a", lambda: make("twin")) == "twin"
    assert made == ["a", "b", "twin"] and len(memo) == 3
    del image, twin
    gc.collect()
    assert len(memo) == 0


def test_data_urls_and_shrunk_copies_are_reused_for_the_same_image() -> None:
    page = Image.new("RGB", (2048, 1024), "white")
    assert image_data_url(page) is image_data_url(page)
    small = shrink(page, 1024)
    assert small.size == (1024, 512) and shrink(page, 1024) is small
    assert shrink(page, 512) is not small
    assert image_data_url(Image.new("RGB", (4, 4), "blue")) != image_data_url(Image.new("RGB", (4, 4), "red"))
