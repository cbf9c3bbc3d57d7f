"""The sites a month is built from: the shipped registry (the paper's Table 28) or a user's file of the
same shape, and the allowlist of hosts a capture may reach."""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from fastmmeval.errors import ConfigError
from fastmmeval.live.records import Source

_FIELDS = ("name", "url", "category", "language")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_LANGUAGE = re.compile(r"[A-Za-z]{2,3}(-[A-Za-z0-9]{1,8})*")


def load_sources(path: Path | None = None) -> list[Source]:
    """The sources listed in `path` (None: the shipped registry), in file order."""
    if path is None:
        where = "the shipped live sources.yaml"
        text = (resources.files("fastmmeval.live") / "sources.yaml").read_text(encoding="utf-8")
    else:
        where = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"{where}: cannot read the sources file ({e})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: not valid YAML ({' '.join(str(e).split())})") from None
    if not isinstance(data, dict) or set(data) != {"sources"} or not isinstance(data["sources"], list):
        raise ConfigError(f"{where}: expected a mapping with one key, `sources`, holding a list of sites")
    sources: list[Source] = []
    first: dict[str, str] = {}
    for index, entry in enumerate(data["sources"]):
        at = f"{where}: sources[{index}]"
        source = _source(entry, at)
        for field in ("name", "url"):
            value = getattr(source, field)
            if (field, value) in first:
                raise ConfigError(f"{at}.{field}: {value!r} is already {first[field, value]}'s {field}")
            first[field, value] = f"sources[{index}]"
        sources.append(source)
    if not sources:
        raise ConfigError(f"{where}: `sources` lists no site")
    return sources


def _source(entry: Any, at: str) -> Source:
    if not isinstance(entry, dict):
        raise ConfigError(f"{at}: expected a mapping with {', '.join(_FIELDS)}, got {type(entry).__name__}")
    unknown = sorted(str(k) for k in entry if k not in _FIELDS)
    if unknown:
        raise ConfigError(f"{at}: unknown field {unknown[0]!r} (the fields are {', '.join(_FIELDS)})")
    for field in _FIELDS:
        if field in entry and not isinstance(entry[field], str):
            raise ConfigError(f"{at}.{field}: expected a string, got {entry[field]!r}")
    for field in ("name", "url"):
        if not entry.get(field):
            raise ConfigError(f"{at}: no `{field}`")
    name, url = entry["name"], entry["url"]
    if not _NAME.fullmatch(name):
        raise ConfigError(f"{at}.name: {name!r} is not a name (letters, digits, '.', '_' and '-')")
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = urlsplit("")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{at}.url: {url!r} is not an http(s) URL with a host")
    language = entry.get("language", "en")
    if not _LANGUAGE.fullmatch(language):
        raise ConfigError(f"{at}.language: {language!r} is not a BCP 47 language tag (e.g. en, ja, zh-Hans)")
    return Source(name, url, entry.get("category", ""), language)


def allowed_hosts(sources: Iterable[Source], extra: Iterable[str] = ()) -> frozenset[str]:
    """The hosts a capture of `sources` may reach: each source's own host, and `extra` (a site's image or
    script hosts, e.g. a CDN). Each host also allows its subdomains (see `host_allowed`)."""
    hosts = {urlsplit(s.url).hostname or "" for s in sources}
    hosts.update(h.strip().lower().rstrip(".") for h in extra)
    hosts.discard("")
    return frozenset(hosts)


def host_allowed(host: str, allowed: frozenset[str]) -> bool:
    """Whether `host` is on the allowlist: listed itself, or a subdomain of a listed host."""
    host = host.lower().rstrip(".")
    return any(host == a or host.endswith("." + a) for a in allowed)
