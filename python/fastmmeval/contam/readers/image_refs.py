"""The image references of corpus records (a path, bytes, a Hugging Face `{'bytes', 'path'}` dict or a PIL
image) opened the one way every image a user hands us is opened (`fastmmeval.images.open_image`, with a pixel
cap), paths kept inside their image root; and the images that could not be opened, counted and named."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from fastmmeval.contam.ngram.image_cache import RefStates
from fastmmeval.contam.ngram.settings import NAMED_MISSING
from fastmmeval.contam.readers.image_tokens import as_rgb
from fastmmeval.images import ImageRefused, confined_path, open_image


@dataclass(frozen=True)
class ImageReading:
    """Where relative image paths start (`root`), whether absolute ones are read, and the pixel cap."""

    root: Path
    allow_absolute: bool
    max_pixels: int | None

    def file(self, ref: Any) -> Path | None:
        """The file a reference names, or None when the image is embedded (bytes, PIL) or malformed;
        ImageRefused for a path outside the root (or an absolute one, unless allowed)."""
        if isinstance(ref, dict):
            ref = ref.get("bytes") or ref.get("path")
        if not isinstance(ref, str):
            return None
        if not self.allow_absolute and Path(ref).is_absolute():
            raise ImageRefused("absolute path; --allow_absolute_image_paths reads it")
        return confined_path(ref, self.root, self.allow_absolute)

    def open(self, ref: Any) -> Image.Image:
        """The image a reference names, in RGB; ImageRefused saying why when it cannot be opened."""
        if isinstance(ref, Image.Image):
            return ref.convert("RGB")
        if isinstance(ref, dict):
            ref = ref.get("bytes") or ref.get("path")
        if isinstance(ref, (bytes, bytearray)):
            return as_rgb(open_image(ref, self.max_pixels))
        if not isinstance(ref, str):
            raise ImageRefused(f"not an image reference ({type(ref).__name__})")
        return as_rgb(open_image(self.file(ref), self.max_pixels))

    def add_state(self, states: RefStates, ref: Any) -> None:
        """Adds the state of one image reference to `states` (a path outside the root by its refusal)."""
        try:
            states.add(self.file(ref))
        except ImageRefused:
            states.add_refused()

    def readable(self, ref: Any) -> Image.Image | None:
        """open(ref), or None."""
        try:
            return self.open(ref)
        except ImageRefused:
            return None


def describe_ref(ref: Any) -> str:
    """An image reference as a message names it: a path (shortened), or what kind of embedded value it is."""
    if isinstance(ref, dict):
        ref = ref.get("bytes") or ref.get("path")
    if isinstance(ref, str):
        return repr(ref if len(ref) <= 200 else f"{ref[:200]}...")
    if isinstance(ref, (bytes, bytearray)):
        return f"embedded image of {len(ref):,} bytes"
    return f"a {type(ref).__name__}, not an image path or bytes"


@dataclass
class MissingImages:
    """Images referenced but not read: all counted, the first NAMED_MISSING named."""

    count: int = 0
    named: list[str] = field(default_factory=list)

    def add(self, ref: Any, record_id: str, why: str) -> None:
        """Counts one more, naming it as 'record <id>: <reference> (<why>)' while fewer than NAMED_MISSING are."""
        self.count += 1
        if len(self.named) < NAMED_MISSING:
            why = " ".join(why.split())[:300]
            self.named.append(f"record {' '.join(record_id.split())[:100]}: {describe_ref(ref)} ({why})")
