"""The two API executors of MMBench-Live's acquisition: keyword image search restricted to the past year
(Serper's Google image API) and open-domain recent uploads (Flickr's `flickr.photos.getRecent`). Each
reads its API key from the environment (a ConfigError naming the variable if it is unset) and keeps it
out of fingerprints, records and errors; each base URL is configurable (the tests point them at stand-ins
on 127.0.0.1)."""

from __future__ import annotations

import os
import threading
from typing import Any
from urllib.parse import urlencode

from fastmmeval.errors import ConfigError
from fastmmeval.evolve.fetch import FetchError, http_get, http_post_json, parse_json
from fastmmeval.evolve.sanitize import Rejected
from fastmmeval.evolve.sources import BaseSource, Found, Retrieved, SourceError, rank
from fastmmeval.live.store import Blobs

SERPER_URL = "https://google.serper.dev"
SERPER_KEY = "SERPER_API_KEY"
FLICKR_URL = "https://api.flickr.com/services/rest"
FLICKR_KEY = "FLICKR_API_KEY"
FLICKR_EXTRAS = "date_upload,description,tags,url_c,url_m"
FLICKR_MAX_PAGE = 500  # getRecent's largest per_page


def api_key(env: str, user: str) -> str:
    """The API key in the environment variable `env`, or a ConfigError naming it."""
    key = os.environ.get(env, "").strip()
    if not key:
        raise ConfigError(f"{user} needs an API key: set the environment variable {env}")
    return key


class _ApiSource(BaseSource):
    """An executor behind an API key: fetches images from any host (the API chose them)."""

    def __init__(self, base_url: str, key_env: str, keep_undated: bool, **settings: Any) -> None:
        super().__init__(**settings)
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"evolve source {self.name}: base_url {base_url!r} is not an http(s) URL")
        self.base_url = base_url.rstrip("/")
        self.keep_undated = keep_undated
        self._key = api_key(key_env, f"the evolve source {self.name}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r})"

    def _failed(self, what: str, error: Exception) -> SourceError:
        """The error of a failed API call, the key blanked out should the message hold it."""
        return SourceError(f"{self.name}: {what}: {str(error).replace(self._key, '***')}")

    def _load(self, item: Found) -> bytes:
        try:
            fetched = http_get(item.url, self.caps.max_bytes, self.timeout_s)
        except FetchError as e:
            raise Rejected(f"fetch: {e}") from None
        if not fetched.content_type.startswith("image/"):
            raise Rejected(f"content type {fetched.content_type or 'none'}, not an image")
        return fetched.body


class SerperSource(_ApiSource):
    """Google image search through Serper: POST {base_url}/images with the query, `num` = limit and
    `tbs` (default qdr:y, the past year), key in X-API-KEY; results in the API's order. Serper's image
    results carry no date as a rule (the past-year filter is Google's), so undated ones are kept unless
    `keep_undated=False`; a result that has a `date` must still be inside the window."""

    name = "serper"

    def __init__(self, base_url: str = SERPER_URL, tbs: str = "qdr:y", keep_undated: bool = True,
                 **settings: Any) -> None:
        super().__init__(base_url, SERPER_KEY, keep_undated, **settings)
        self.tbs = tbs

    def fingerprint(self) -> dict[str, Any]:
        """The endpoint, the time filter and the window."""
        return {**self.settings(), "base_url": self.base_url, "tbs": self.tbs}

    def retrieve(self, query: str, limit: int, blobs: Blobs) -> Retrieved:
        """Serper's `limit` image results for `query`, in its order."""
        body = {"q": query, "num": limit, "tbs": self.tbs}
        try:
            reply = http_post_json(f"{self.base_url}/images", body, self.max_response_bytes, self.timeout_s,
                                   {"X-API-KEY": self._key})
        except FetchError as e:
            raise self._failed(f"{self.base_url}/images", e) from None
        images = reply.get("images") if isinstance(reply, dict) else None
        if not isinstance(images, list):
            raise SourceError(f"serper: {self.base_url}/images: the reply has no `images` list")
        found, skipped = [], []
        for image in images:
            if not isinstance(image, dict) or not isinstance(image.get("imageUrl"), str):
                skipped.append({"url": "", "reason": "a result without an imageUrl"})
                continue
            found.append(Found(image["imageUrl"], image["imageUrl"], str(image.get("link") or ""),
                               str(image.get("title") or ""), str(image.get("source") or ""),
                               str(image.get("date") or "")))
        out = self.collect(found, query, limit, blobs, self._load)
        out.dropped[:0] = skipped
        return out


class FlickrSource(_ApiSource):
    """Flickr's most recent public uploads (`flickr.photos.getRecent`, `pool` photos, fetched once per
    source), ranked for each query by the words shared with their title, description and tags. Every
    photo has an upload date; one without is dropped."""

    name = "flickr"

    def __init__(self, base_url: str = FLICKR_URL, pool: int = 100, keep_undated: bool = False,
                 **settings: Any) -> None:
        super().__init__(base_url, FLICKR_KEY, keep_undated, **settings)
        if not 1 <= pool <= FLICKR_MAX_PAGE:
            raise ConfigError(f"evolve source flickr: pool must be in 1..{FLICKR_MAX_PAGE}, got {pool}")
        self.pool = pool
        self._lock = threading.Lock()
        self._recent: tuple[list[Found], list[dict[str, str]]] | None = None

    def fingerprint(self) -> dict[str, Any]:
        """The endpoint, the pool size and the window."""
        return {**self.settings(), "base_url": self.base_url, "pool": self.pool}

    def retrieve(self, query: str, limit: int, blobs: Blobs) -> Retrieved:
        """The best `limit` recent photos for `query` (ties in Flickr's order)."""
        found, skipped = self.recent()
        order = rank(query, [f.text() for f in found])
        out = self.collect([found[i] for i in order], query, limit, blobs, self._load)
        out.dropped[:0] = skipped
        return out

    def recent(self) -> tuple[list[Found], list[dict[str, str]]]:
        """The recent photos (asked for on the first call only) and those without an image URL."""
        with self._lock:
            if self._recent is None:
                self._recent = self._get_recent()
            return self._recent

    def _get_recent(self) -> tuple[list[Found], list[dict[str, str]]]:
        params = {"method": "flickr.photos.getRecent", "api_key": self._key, "extras": FLICKR_EXTRAS,
                  "per_page": self.pool, "format": "json", "nojsoncallback": 1}
        try:
            reply = parse_json(http_get(f"{self.base_url}?{urlencode(params)}", self.max_response_bytes,
                                        self.timeout_s))
        except FetchError as e:
            raise self._failed(self.base_url, e) from None
        if not isinstance(reply, dict) or reply.get("stat") != "ok":
            detail = reply.get("message", "no message") if isinstance(reply, dict) else "not an object"
            raise self._failed(self.base_url, Exception(f"the API answered {detail}"))
        page_of = reply.get("photos")
        photos = page_of.get("photo") if isinstance(page_of, dict) else None
        if not isinstance(photos, list):
            raise SourceError(f"flickr: {self.base_url}: the reply has no photos.photo list")
        found, skipped = [], []
        for photo in photos:
            if not isinstance(photo, dict):
                skipped.append({"url": "", "reason": "a photo that is not an object"})
                continue
            page = f"https://www.flickr.com/photos/{photo.get('owner', '')}/{photo.get('id', '')}"
            url = photo.get("url_c") or photo.get("url_m")
            if not isinstance(url, str):
                skipped.append({"url": page, "reason": "no image URL (url_c, url_m)"})
                continue
            description = photo.get("description")
            text = description.get("_content", "") if isinstance(description, dict) else ""
            tags = str(photo.get("tags") or "")
            context = "\n".join(p for p in (" ".join(text.split()), f"tags: {tags}" if tags else "") if p)
            found.append(Found(url, url, page, str(photo.get("title") or ""), context,
                               str(photo.get("dateupload") or "")))
        return found, skipped
