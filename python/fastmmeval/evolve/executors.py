"""The acquisition executors by name: `open_source("folder", root=...)`, "crawl", "serper", "flickr" (one
factory the CLI and the tests call; the executors themselves are in sources, crawl and search_apis)."""

from __future__ import annotations

import inspect
from typing import Any

from fastmmeval.errors import ConfigError
from fastmmeval.evolve.crawl import CrawlSource
from fastmmeval.evolve.search_apis import FlickrSource, SerperSource
from fastmmeval.evolve.sources import KINDS, BaseSource, FolderSource, ImageSource


def open_source(kind: str, **options: Any) -> ImageSource:
    """The executor `kind` ('folder', 'crawl', 'serper', 'flickr') with its options (e.g. root=..., sites=...,
    base_url=...; every one takes window_days, now, caps, timeout_s, max_response_bytes, workers)."""
    classes: dict[str, type[Any]] = {"folder": FolderSource, "crawl": CrawlSource, "serper": SerperSource,
                                     "flickr": FlickrSource}
    if kind not in classes:
        raise ConfigError(f"evolve source {kind!r}: expected one of {', '.join(KINDS)}")
    cls = classes[kind]
    known = [p for c in (cls, BaseSource) for p in inspect.signature(c.__init__).parameters
             if p not in ("self", "settings")]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ConfigError(f"evolve source {kind}: unknown option {unknown[0]!r} (its options: {', '.join(known)})")
    return cls(**options)
