"""The tokenizer choice of an index or an audit: the tokenizers that specs name, what an index records of
them, and which ones an index was built with (the ones asked for must agree with them, or its n-grams would
never match)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastmmeval.contam.readers.image_tokens import ImageTokenizer, make_image_tokenizer
from fastmmeval.contam.readers.text_tokens import TextTokenizer, make_text_tokenizer
from fastmmeval.errors import ConfigError


@dataclass(frozen=True)
class Tokenizers:
    """A text tokenizer and an image tokenizer (None: text only), with the specs they were asked for by (None:
    the index's, or the default)."""

    text: TextTokenizer
    image: ImageTokenizer | None
    text_spec: str | None = None
    image_spec: str | None = None

    def describe(self) -> dict[str, dict[str, Any] | None]:
        """What an index's meta and a report's settings record of the two: spec, fingerprint, Unicode version."""
        image = None if self.image is None else _describe(self.image, self.image_spec or self.image.name)
        return {"text_tokenizer": _describe(self.text, self.text_spec or self.text.name), "image_tokenizer": image}


def _describe(tok: Any, spec: str) -> dict[str, Any]:
    unicode = getattr(tok, "unicode_version", None)
    return {"spec": spec, "fingerprint": tok.fingerprint, **({"unicode": unicode} if unicode else {})}


def choose_tokenizers(text_spec: str = "words", image_spec: str = "offline") -> Tokenizers:
    """The tokenizers the specs name (`make_text_tokenizer`, `make_image_tokenizer`)."""
    text = make_text_tokenizer(text_spec)
    return Tokenizers(text, make_image_tokenizer(image_spec), text_spec, image_spec)


def _unicode_drift(recorded: dict[str, Any], tok: Any) -> str | None:
    """Why the text tokenizer may split some text otherwise than when the index was built, or None."""
    built, here = recorded.get("unicode"), getattr(tok, "unicode_version", None)
    if built is None or here is None or built == here:
        return None
    return (
        f"the index's words were split under Unicode {built}, this Python's is {here}: words holding characters "
        "assigned or re-classified in between may split differently"
    )


def recorded_image_spec(recorded: dict[str, Any] | None) -> str:
    """The spec that gives the image tokenizer an index was built with: `offline` as recorded names the
    latest version, so the offline tokenizer's version comes from the recorded fingerprint."""
    if recorded is None:
        return "none"
    version = re.fullmatch(r"offline-v(\d+)", str(recorded.get("fingerprint", "")))
    return f"offline:{version[1]}" if version else str(recorded.get("spec", "none"))


def index_tokenizers(
    meta: dict[str, Any],
    text_spec: str | None = None,
    image_spec: str | None = None,
    adding: bool = False,
    warn: Callable[[str], None] | None = None,
) -> Tokenizers:
    """The tokenizers an index (its `meta`) was built with, or the ones the specs name if their fingerprints
    agree (a ConfigError if not). Under another Unicode version than the build's, adding to the index is
    refused (it would mix two splits), and anything else goes on with `warn` told why."""
    recorded_text = meta.get("text_tokenizer") or {}
    recorded_image = meta.get("image_tokenizer")
    text_choice = text_spec or recorded_text.get("spec", "words")
    image_choice = image_spec or recorded_image_spec(recorded_image)
    text_tok, image_tok = make_text_tokenizer(text_choice), make_image_tokenizer(image_choice)
    if recorded_text and text_tok.fingerprint != recorded_text.get("fingerprint"):
        raise ConfigError(
            f"--text_tokenizer {text_choice}: fingerprint {text_tok.fingerprint} differs from the index's "
            f"{recorded_text.get('fingerprint')} ({recorded_text.get('spec')}); its n-grams would never match"
        )
    drift = _unicode_drift(recorded_text, text_tok)
    if drift and adding:
        raise ConfigError(f"contam add: {drift}; add with the Python that built the index, or build a new one")
    if drift and warn is not None:
        warn(drift)
    if image_tok is not None:
        if recorded_image is None:
            raise ConfigError(f"--image_tokenizer {image_choice}: the index was built without image tokens")
        if image_tok.fingerprint != recorded_image.get("fingerprint"):
            raise ConfigError(
                f"--image_tokenizer {image_choice}: fingerprint {image_tok.fingerprint} differs from the index's "
                f"{recorded_image.get('fingerprint')} ({recorded_image.get('spec')})"
            )
    return Tokenizers(text_tok, image_tok, text_spec, image_spec)
