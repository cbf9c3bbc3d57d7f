"""Image acquisition behind one interface (MMBench-Live's acquisition executor): an `ImageSource` turns a
query into candidates in rank order, each image sanitized (`evolve.sanitize`) and stored as a blob. The
executors: `folder` (a local folder or manifest, the offline default; here), `crawl` (allowlisted sites in
headless Chromium; `evolve.crawl`), `serper` (Google image search through Serper, the past year) and
`flickr` (Flickr's recent uploads; both in `evolve.search_apis`).

    source = open_source("folder", root="images/")
    found = source.retrieve("red circles on a sign", 10, blobs)   # a Retrieved: list of Candidate
    found.dropped                                                  # [{"url": ..., "reason": ...}, ...]

Every source keeps only images uploaded within `window_days` of `now` (an image without a date is kept by
the folder, the crawl and Serper, whose own filter is the past year; dropped by Flickr, whose every photo
has one; `keep_undated` changes the API sources'), and records why it dropped each image it looked at."""

from __future__ import annotations

import csv
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Protocol

from fastmmeval.errors import ConfigError, FastmmevalError
from fastmmeval.evolve.fetch import FetchError
from fastmmeval.evolve.records import Candidate
from fastmmeval.evolve.sanitize import ImageCaps, Rejected, sanitize
from fastmmeval.live.store import Blobs

KINDS = ("folder", "crawl", "serper", "flickr")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".tif", ".tiff")
MANIFESTS = ("manifest.jsonl", "manifest.csv")
MANIFEST_FIELDS = ("file", "title", "context", "uploaded_at", "url")
_WORD = re.compile(r"[^\W_]+")
_RELATIVE = re.compile(r"(\d+)\s+(minute|hour|day|week|month|year)s?\s+ago")
_UNIT_DAYS = {"minute": 1 / 1440, "hour": 1 / 24, "day": 1, "week": 7, "month": 30, "year": 365}
_DATE_FORMATS = ("%b %d, %Y", "%B %d, %Y", "%d %b %Y", "%d %B %Y")


class SourceError(FastmmevalError):
    """A source that could not be searched at all (its API failed or answered nonsense): one line, never
    the API key."""


class Retrieved(list[Candidate]):
    """A retrieval's candidates in rank order (a list), with `dropped`: each image looked at and not kept,
    as {"url", "reason"}."""

    def __init__(self, candidates: Iterable[Candidate] = (), dropped: Iterable[dict[str, str]] = ()) -> None:
        super().__init__(candidates)
        self.dropped = list(dropped)


class ImageSource(Protocol):
    """One acquisition executor."""

    name: str

    def fingerprint(self) -> dict[str, Any]:
        """What identifies its results (never an API key)."""
        ...

    def retrieve(self, query: str, limit: int, blobs: Blobs) -> Retrieved:
        """At most `limit` candidates for `query`, in rank order, their images stored in `blobs`."""
        ...


@dataclass
class Found:
    """An image a source found, before its bytes are fetched: `where` it is (URL or file) and what the
    source says about it."""

    where: str
    url: str = ""
    page_url: str = ""
    title: str = ""
    context: str = ""
    uploaded_at: str = ""

    def text(self) -> str:
        """The text a query is matched against."""
        return " ".join((self.title, self.context, self.where))


def terms(text: str) -> set[str]:
    """The casefolded words of `text` (letters and digits; '_' and punctuation split them)."""
    return set(_WORD.findall(text.casefold()))


def rank(query: str, texts: Sequence[str]) -> list[int]:
    """Indices of `texts`, most of the query's distinct words first; ties (and the empty query) keep the
    given order."""
    wanted = terms(query)
    scores = [len(wanted & terms(t)) for t in texts]
    return sorted(range(len(texts)), key=lambda i: (-scores[i], i))


def parse_time(text: str, now: datetime) -> datetime | None:
    """An upload time as a UTC datetime: ISO 8601 (a date alone, or a time without zone, is UTC), a Unix
    time in seconds, 'Mar 5, 2026' and the like, or 'N days ago' (from `now`); None if not understood."""
    text = text.strip()
    if text.isdigit():
        return datetime.fromtimestamp(int(text), timezone.utc)
    relative = _RELATIVE.fullmatch(text.lower())
    if relative:
        return now - timedelta(days=int(relative[1]) * _UNIT_DAYS[relative[2]])
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        when = None
        for form in _DATE_FORMATS:
            try:
                when = datetime.strptime(text, form)
                break
            except ValueError:
                continue
    if when is None:
        return None
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)


def iso_utc(when: datetime) -> str:
    """`when` as ISO 8601 UTC to the second ('2026-03-05T12:00:00Z')."""
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class BaseSource:
    """What every executor shares: the recency window, the image caps, HTTP limits, and `collect`, which
    turns found images in rank order into candidates."""

    name = ""
    keep_undated = True  # whether an image without an upload date passes the window

    def __init__(self, window_days: int | None = 365, now: datetime | str | None = None,
                 caps: ImageCaps | None = None, timeout_s: float = 20.0, max_response_bytes: int = 8 << 20,
                 workers: int = 8) -> None:
        if window_days is not None and window_days < 1:
            raise ConfigError(f"evolve source {self.name}: window_days must be at least 1, got {window_days}")
        if not timeout_s > 0 or max_response_bytes < 1 or workers < 1:
            raise ConfigError(f"evolve source {self.name}: timeout_s, max_response_bytes and workers must be positive")
        if isinstance(now, str):
            parsed = parse_time(now, datetime.now(timezone.utc))
            if parsed is None:
                raise ConfigError(f"evolve source {self.name}: now={now!r} is not an ISO 8601 time")
            now = parsed
        self.now = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
        self.window_days = window_days
        self.caps = caps or ImageCaps()
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes
        self.workers = workers

    def settings(self) -> dict[str, Any]:
        """The fingerprint's shared part: window (with the day it ends) and caps."""
        return {"source": self.name, "window_days": self.window_days, "until": self.now.date().isoformat(),
                "keep_undated": self.keep_undated, "caps": asdict(self.caps)}

    def too_old(self, uploaded_at: str) -> str | None:
        """Why an image uploaded at `uploaded_at` is outside the window, or None if it is inside."""
        if self.window_days is None:
            return None
        if not uploaded_at:
            return None if self.keep_undated else "no upload date (this source keeps dated images only)"
        when = parse_time(uploaded_at, self.now)
        if when is None:
            return f"upload date {uploaded_at!r} not understood"
        if self.now - when > timedelta(days=self.window_days):
            return f"uploaded {iso_utc(when)}, over {self.window_days} days before {iso_utc(self.now)}"
        return None

    def collect(self, found: Sequence[Found], query: str, limit: int, blobs: Blobs,
                load: Callable[[Found], bytes]) -> Retrieved:
        """Candidates from `found` (in rank order) until `limit` are kept: each image's date checked, its
        bytes loaded (`load` raises Rejected or FetchError with the reason), sanitized and stored; images
        are loaded `workers` at a time."""
        def one(item: Found) -> Candidate | str:
            reason = self.too_old(item.uploaded_at)
            if reason:
                return reason
            try:
                clean = sanitize(load(item), self.caps)
            except (Rejected, FetchError) as e:
                return str(e)
            when = parse_time(item.uploaded_at, self.now) if item.uploaded_at else None
            return Candidate(blobs.put(clean.data, clean.suffix), clean.suffix, self.name, clean.width, clean.height,
                             clean.phash, item.url, item.page_url, item.title, item.context,
                             iso_utc(when) if when else "", query)

        out = Retrieved()
        seen: set[str] = set()
        todo = list(found)
        with ThreadPoolExecutor(self.workers) as pool:
            while todo and len(out) < limit:
                batch, todo = todo[: limit - len(out)], todo[limit - len(out):]
                for item, result in zip(batch, pool.map(one, batch), strict=True):
                    if isinstance(result, Candidate) and result.sha in seen:
                        result = "the same bytes as a candidate above"
                    if isinstance(result, str):
                        out.dropped.append({"url": item.url or item.where, "reason": result})
                    else:
                        seen.add(result.sha)
                        out.append(result)
        return out


class FolderSource(BaseSource):
    """Images in a local folder: those its manifest (`manifest.jsonl`, or `manifest.csv` with a header row;
    fields file, title, context, uploaded_at, url) lists, in its order, or without one every image file
    under it, by path. `root` may also name the manifest file itself. A candidate's `url` is the
    manifest's, or else the file's path in the folder."""

    name = "folder"

    def __init__(self, root: str | Path, **settings: Any) -> None:
        super().__init__(**settings)
        path = Path(root)
        manifest = path if path.is_file() else next((path / m for m in MANIFESTS if (path / m).is_file()), None)
        self.root = (path.parent if path.is_file() else path).resolve()
        if not self.root.is_dir():
            raise ConfigError(f"evolve source folder: {root}: no such folder")
        self.manifest = manifest
        self.entries = _read_manifest(manifest, self.root, self.now) if manifest else _list_images(self.root)
        if not self.entries:
            raise ConfigError(f"evolve source folder: {root}: no images (expected image files or a manifest)")

    def fingerprint(self) -> dict[str, Any]:
        """The folder, its manifest's sha256, the files' names, sizes and modification times, the window."""
        listing = hashlib.sha256()
        for entry in self.entries:
            stat = (self.root / entry.where).stat()
            listing.update(json.dumps([entry.where, stat.st_size, stat.st_mtime_ns]).encode())
        manifest = hashlib.sha256(self.manifest.read_bytes()).hexdigest() if self.manifest else None
        return {**self.settings(), "root": str(self.root), "manifest": manifest, "files": listing.hexdigest()}

    def retrieve(self, query: str, limit: int, blobs: Blobs) -> Retrieved:
        """The best `limit` images for `query` by the words shared with their title, context and file name
        (ties in manifest order; the empty query: manifest order)."""
        order = rank(query, [e.text() for e in self.entries])
        return self.collect([self.entries[i] for i in order], query, limit, blobs, self._load)

    def _load(self, entry: Found) -> bytes:
        path = self.root / entry.where
        size = path.stat().st_size
        if size > self.caps.max_bytes:
            raise Rejected(f"{size:,} bytes, over the cap of {self.caps.max_bytes:,}")
        return path.read_bytes()


def _list_images(root: Path) -> list[Found]:
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                   if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    return [Found(f, f) for f in files]


def _manifest_rows(manifest: Path) -> Iterable[tuple[str, Any]]:
    """(where, row) of each manifest row: 'manifest.jsonl:3' and the parsed line."""
    try:
        text = manifest.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{manifest}: cannot read the manifest ({e})") from None
    if manifest.suffix.lower() == ".csv":
        for number, row in enumerate(csv.DictReader(text.splitlines()), 2):
            yield f"{manifest}:{number}", row
        return
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield f"{manifest}:{number}", json.loads(line)
        except ValueError as e:
            raise ConfigError(f"{manifest}:{number}: not a JSON object ({e})") from None


def _read_manifest(manifest: Path, root: Path, now: datetime) -> list[Found]:
    entries = []
    for at, row in _manifest_rows(manifest):
        if not isinstance(row, dict):
            raise ConfigError(f"{at}: expected an object with {', '.join(MANIFEST_FIELDS)}")
        fields = {k: row.get(k) or "" for k in MANIFEST_FIELDS}
        bad = next((k for k, v in fields.items() if not isinstance(v, str)), None)
        if bad:
            raise ConfigError(f"{at}: `{bad}` must be a string, got {fields[bad]!r}")
        file = fields["file"]
        if not file:
            raise ConfigError(f"{at}: no `file`")
        path = (root / file).resolve()
        if Path(file).is_absolute() or not path.is_relative_to(root):
            raise ConfigError(f"{at}: file {file!r} is outside the folder {root}; manifest paths stay inside it")
        if not path.is_file():
            raise ConfigError(f"{at}: file {file!r} does not exist in {root}")
        if fields["uploaded_at"] and parse_time(fields["uploaded_at"], now) is None:
            raise ConfigError(f"{at}: uploaded_at {fields['uploaded_at']!r} is not an ISO 8601 time")
        where = path.relative_to(root).as_posix()
        entries.append(Found(where, fields["url"] or where, "", fields["title"], fields["context"],
                             fields["uploaded_at"]))
    return entries
