"""Opening images a user or a client hands us: a pixel cap checked before decoding, and file
paths kept inside their root."""

from __future__ import annotations

import argparse
import io
import os
import re
import struct
import threading
import warnings
from pathlib import Path
from typing import IO

from PIL import Image

from fastmmeval.argtypes import positive_int

# 64 MP decodes to 192 MB of RGB: above any benchmark image we ship (documents included), far below
# what a crafted 140 KB PNG declares. `--max_image_pixels` changes it.
DEFAULT_MAX_PIXELS = 64_000_000

_decoder_cap = threading.Lock()


def bound_decoders(max_pixels: int | None) -> None:
    """Hold the images other libraries decode for us (`datasets` decodes hub images before we see
    them) to `max_pixels` too, through PIL's own bomb check (an error above twice its limit): the
    process keeps the largest cap any caller asked for, so no caller's cap is undercut."""
    with _decoder_cap:
        current = Image.MAX_IMAGE_PIXELS
        if current is None:
            return
        wanted = None if max_pixels is None else max_pixels // 2 + 1
        Image.MAX_IMAGE_PIXELS = None if wanted is None else max(current, wanted)


# PIL's default (an error at 179 MP) lies far above our cap; its warning between half and all of the
# cap is no refusal, so it is silenced (the error above the cap is what bounds third-party decoding).
Image.MAX_IMAGE_PIXELS = DEFAULT_MAX_PIXELS // 2 + 1
warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)


class ImageRefused(ValueError):
    """An image that is not opened: unreadable, over the pixel cap, or a path outside its root."""


def open_image(
    source: bytes | bytearray | str | Path | IO[bytes], max_pixels: int | None = DEFAULT_MAX_PIXELS
) -> Image.Image:
    """The decoded image (first frame, its own mode) from bytes, a path or a binary file; an image
    whose declared size exceeds `max_pixels` is refused before any pixel is decoded."""
    bound_decoders(max_pixels)
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
        try:
            image = Image.open(fp)
        except Image.DecompressionBombError as e:  # PIL's check (see bound_decoders) came before ours
            pixels = re.search(r"\((\d+) pixels\)", str(e))
            declared = f"{int(pixels[1]):,} pixels" if pixels else "its size"
            raise ImageRefused(f"{declared}, over the cap of {max_pixels:,} (--max_image_pixels)") from None
        within_cap(image, max_pixels).load()
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
    """The file an image reference names: a relative path joined to `root` and refused if its `..`
    lead outside it; an absolute path only when `allow_absolute`. Symlinks inside the root are
    followed: a row's text cannot make one, and corpora often link their image folders in."""
    if "\x00" in str(ref):
        raise ImageRefused(f"image path {str(ref)!r} holds a NUL byte")
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
    joined = Path(os.path.normpath(root / path))
    if not joined.is_relative_to(os.path.normpath(root)):
        raise ImageRefused(f"image path {str(ref)!r} leaves its root {str(root)!r}")
    return joined


TASK_IMAGES_HELP = (
    "a doc whose image declares more pixels fails as unreadable, refused before decoding",
    "open absolute image paths in dataset rows (by default only paths inside the dataset's image_root, "
    "and absolute ones where the task file's dataset says allow_absolute_paths: true)",
)


def image_flags(parser: argparse.ArgumentParser, helps: tuple[str, str] = TASK_IMAGES_HELP) -> None:
    """Add `--max_image_pixels` and `--allow_absolute_image_paths` to a subcommand that reads images;
    `helps` says what each does there (by default: to task images)."""
    cap_help, absolute_help = helps
    parser.add_argument(
        "--max_image_pixels",
        type=positive_int,
        default=DEFAULT_MAX_PIXELS,
        help=f"{cap_help} (default {DEFAULT_MAX_PIXELS:,})",
    )
    parser.add_argument("--allow_absolute_image_paths", action="store_true", help=absolute_help)
