"""What an acquired image must pass before it becomes a candidate: a size cap in bytes, a pixel cap (PIL's
decompression-bomb guard included), a minimum side, a decodable image; and what is kept of it: the
pixels alone, re-encoded (EXIF, ICC profiles, comments and every other metadata block dropped, the EXIF
orientation applied first so the picture still stands the right way up)."""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

from PIL import Image, ImageOps

from fastmmeval.errors import ConfigError


class Rejected(Exception):
    """An image that does not pass; the message is the reason recorded with the dropped image."""


@dataclass(frozen=True)
class ImageCaps:
    """The limits an image must keep: at most `max_bytes` as fetched, at most `max_pixels` (width x
    height), at least `min_side` pixels on both sides."""

    max_bytes: int = 20 << 20
    max_pixels: int = 40_000_000
    min_side: int = 80

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_pixels", "min_side"):
            if getattr(self, name) < 1:
                raise ConfigError(f"image cap {name} must be at least 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class CleanImage:
    """A sanitized image: its re-encoded bytes (`suffix` .jpg for a JPEG input, .png otherwise), size and
    64-bit perceptual hash (hex)."""

    data: bytes
    suffix: str
    width: int
    height: int
    phash: str


def sanitize(data: bytes, caps: ImageCaps) -> CleanImage:
    """`data` checked against `caps` and re-encoded without metadata; Rejected (with the reason) if not."""
    import imagehash

    if len(data) > caps.max_bytes:
        raise Rejected(f"{len(data):,} bytes, over the cap of {caps.max_bytes:,}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                _check_size(image.width, image.height, caps)
                kind = image.format
                image.load()
                upright = ImageOps.exif_transpose(image)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise Rejected(f"a decompression bomb ({e})") from None
    except Rejected:
        raise
    except Exception as e:  # noqa: BLE001 (PIL raises many kinds for a broken file)
        raise Rejected(f"not a decodable image ({type(e).__name__}: {e})") from None
    _check_size(upright.width, upright.height, caps)
    has_alpha = upright.mode in ("RGBA", "LA", "PA") or "transparency" in upright.info
    mode = "RGB" if kind == "JPEG" or not has_alpha else "RGBA"
    # A new image from the pixels alone carries none of the source's info (EXIF, ICC, text chunks).
    pixels = upright.convert(mode)
    clean = Image.frombytes(mode, pixels.size, pixels.tobytes())
    out = io.BytesIO()
    if kind == "JPEG":
        clean.save(out, format="JPEG", quality=95)
    else:
        clean.save(out, format="PNG")
    return CleanImage(out.getvalue(), ".jpg" if kind == "JPEG" else ".png", clean.width, clean.height,
                      str(imagehash.phash(clean)))


def _check_size(width: int, height: int, caps: ImageCaps) -> None:
    if width * height > caps.max_pixels:
        raise Rejected(f"{width}x{height} pixels, over the cap of {caps.max_pixels:,}")
    if min(width, height) < caps.min_side:
        raise Rejected(f"{width}x{height} pixels, a side under {caps.min_side}")
