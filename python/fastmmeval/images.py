"""Opening images a user or a client hands us: a pixel cap checked before decoding, and file
paths kept inside their root."""

from __future__ import annotations

import argparse
import io
import struct
import warnings
from pathlib import Path
from typing import IO

from PIL import Image

from fastmmeval.argtypes import positive_int

# 64 MP decodes to 192 MB of RGB: above any benchmark image we ship (documents included), far below
# what a crafted 140 KB PNG declares. `--max_image_pixels` changes it.
DEFAULT_MAX_PIXELS = 64_000_000

# Our cap is the only one: PIL's own (a warning at 89 MP, an error at 179 MP) would otherwise fire
# before ours when a user raises the cap, and as a warning it is not a refusal at all.
Image.MAX_IMAGE_PIXELS = None


class ImageRefused(ValueError):
    """An image that is not opened: unreadable, over the pixel cap, or a path outside its root."""


def check_max_pixels(value: int | None, flag: str = "--max_image_pixels") -> int | None:
    """The cap as given (None: no cap), refusing a non-positive one."""
    if value is not None and value <= 0:
        raise ValueError(f"{flag} must be positive, got {value}")
    return value


def open_image(
    source: bytes | bytearray | str | Path | IO[bytes], max_pixels: int | None = DEFAULT_MAX_PIXELS
) -> Image.Image:
    """The decoded image (first frame, its own mode) from bytes, a path or a binary file; an image
    whose declared size exceeds `max_pixels` is refused before any pixel is decoded."""
    try:
        if isinstance(source, (str, Path)):
            # Our own handle, closed here: PIL keeps a multi-frame file (GIF, WebP) open for seeking.
            with open(source, "rb") as f:
                return _decode(f, max_pixels)
        return _decode(io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source, max_pixels)
    except ImageRefused:
        raise
    except (
        OSError, ValueError, SyntaxError, EOFError, struct.error, IndexError, TypeError, KeyError,
        Image.DecompressionBombError,
    ) as e:  # fmt: skip
        # PIL reports a malformed file as any of these (SyntaxError, struct.error and the lookup errors from
        # some decoders' header parsing; UnidentifiedImageError is an OSError).
        raise ImageRefused(f"{type(e).__name__}: {e}") from None


def _decode(fp: IO[bytes], max_pixels: int | None) -> Image.Image:
    with warnings.catch_warnings():
        # PIL warns of damage it reads past (corrupt EXIF, odd chunks): the image decodes or is refused,
        # and a warning per doc on stderr would only bury that.
        warnings.simplefilter("ignore")
        image = within_cap(Image.open(fp), max_pixels)
        image.load()
    return image


def within_cap(image: Image.Image, max_pixels: int | None) -> Image.Image:
    """The image itself if its (declared) size is within `max_pixels`; held to the same cap, an image
    someone else decoded (e.g. `datasets`) is refused like a file."""
    width, height = image.size
    if max_pixels is not None and width * height > max_pixels:
        raise ImageRefused(
            f"{width}x{height} = {width * height:,} pixels, over the cap of {max_pixels:,} (--max_image_pixels)"
        )
    return image


def to_rgb(image: Image.Image) -> Image.Image:
    """The image in RGB (itself if it already is); transparency is flattened onto black like PIL's
    convert, without PIL's warning for palette images with transparency; 16-bit grey is scaled to
    8 bits. A mode PIL cannot convert is refused."""
    if image.mode == "RGB":
        return image
    try:
        if image.mode == "P" and "transparency" in image.info:
            image = image.convert("RGBA")
        if image.mode.startswith("I;16"):
            # Scaled instead of clipping everything above 255 to white; PIL's `point` takes only the
            # native-order I;16, so the byte orders (I;16B from TIFF) go through 32-bit I first.
            image = image.convert("I").point(lambda v: v / 256).convert("L")
        return image.convert("RGB")
    except ValueError as e:
        raise ImageRefused(f"mode {image.mode} cannot be converted to RGB: {e}") from None


def confined_path(ref: str | Path, root: Path | None, allow_absolute: bool = False) -> Path:
    """The file an image reference names: a relative path joined to `root` and refused if it
    resolves outside it (`..`, symlinks); an absolute path only when `allow_absolute`."""
    path = Path(ref)
    if path.is_absolute():
        if not allow_absolute:
            raise ImageRefused(
                f"absolute image path {str(ref)!r} refused (allow it with the dataset's "
                "allow_absolute_paths: true or --allow_absolute_image_paths)"
            )
        return path
    if root is None:
        raise ImageRefused(f"relative image path {str(ref)!r} but no image root to resolve it in")
    try:
        resolved = (root / path).resolve()
    except (OSError, ValueError, RuntimeError) as e:  # a NUL byte (ValueError), a symlink loop (RuntimeError)
        raise ImageRefused(f"image path {str(ref)!r}: {e}") from None
    if not resolved.is_relative_to(root.resolve()):
        raise ImageRefused(f"image path {str(ref)!r} leaves its root {str(root)!r}")
    return resolved


def image_flags(parser: argparse.ArgumentParser) -> None:
    """Add `--max_image_pixels` and `--allow_absolute_image_paths` to a subcommand that reads task images."""
    parser.add_argument(
        "--max_image_pixels",
        type=positive_int,
        default=DEFAULT_MAX_PIXELS,
        help="a doc whose image declares more pixels fails as unreadable, refused before decoding "
        f"(default {DEFAULT_MAX_PIXELS:,})",
    )
    parser.add_argument(
        "--allow_absolute_image_paths",
        action="store_true",
        help="open absolute image paths in dataset rows (by default only paths inside the dataset's image_root, "
        "and absolute ones where the task file's dataset says allow_absolute_paths: true)",
    )
