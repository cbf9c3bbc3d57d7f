"""Fixture servers for the evolve sources' tests, on 127.0.0.1: a site of pages with annotated drawn images
(tests/evolve_images.py) as `<img>`s with alt text, figcaptions, nearby text and article dates, plus an
image rendered under 80 px, an `<img>` whose URL answers HTML, one on a host off the allowlist
(`localhost`, the same server under another name) and a page that answers 404; a stand-in for Serper's
image search (POST /images) and one for Flickr's REST API (flickr.photos.getRecent), both serving drawn
images with upload dates inside and outside a year before NOW, each checking its API key. Every server
records what it was asked (`hits`; the search stand-ins also `queries`: the JSON bodies, or the query
parameters), answers at most `max_requests` requests and lives at most `lifetime_s` seconds.

    with ImageSite() as site:
        source = open_source("crawl", sites=site.pages, now=NOW)
    with SerperStandIn(key="k") as serper:          # monkeypatch SERPER_API_KEY=k first
        open_source("serper", base_url=serper.base_url, now=NOW).retrieve("red circles", 5, blobs)
        serper.queries[-1]["q"]                     # 'red circles'
"""

from __future__ import annotations

import io
import json
from functools import cache
from typing import Any

from evolve_images import drawn_scene
from fixture_http import FixtureServer as BoundedServer
from fixture_http import Reply
from PIL import Image

NOW = "2026-12-01T00:00:00Z"  # the `now` the tests pin: the window is the year before it
RECENT = ("2026-03-15T12:00:00Z", "2026-06-01T08:30:00Z", "2026-09-20T17:45:00Z", "2026-11-02T09:00:00Z")
OLD = "2024-05-01T10:00:00Z"  # outside the window
EXIF_MAKE = "FixtureCam"  # the camera make written into the EXIF of the JPEGs served


@cache
def scene_png(i: int) -> bytes:
    """Drawn scene `i` as PNG."""
    out = io.BytesIO()
    drawn_scene(i).image.save(out, format="PNG")
    return out.getvalue()


@cache
def scene_jpeg_with_exif(i: int) -> bytes:
    """Drawn scene `i` as a JPEG carrying EXIF (camera make, a GPS block, a description)."""
    exif = Image.Exif()
    exif[0x010F] = EXIF_MAKE  # Make
    exif[0x010E] = "secret location notes"  # ImageDescription
    exif[0x8825] = {1: "N", 2: (48.0, 51.0, 24.0)}  # GPSInfo
    out = io.BytesIO()
    drawn_scene(i).image.save(out, format="JPEG", quality=90, exif=exif)
    return out.getvalue()


def _tiny_png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (40, 40), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


def scene_title(i: int) -> str:
    """The title the fixtures give scene `i`: its printed word and its shapes' colours."""
    scene = drawn_scene(i)
    return f"{scene.word.title()} sign with {' and '.join(sorted(scene.counts))} shapes"


class FixtureServer(BoundedServer):
    """A fixture server (tests/fixture_http.py) that also serves the drawn images; a subclass answers the
    rest through `answer`."""

    def answer(self, method: str, path: str, params: dict[str, str], headers: Any, body: bytes) -> Reply:
        """(status, content type, body) for one request that is not an image."""
        raise NotImplementedError

    def respond(self, method: str, path: str, params: dict[str, str], headers: Any, body: bytes) -> Reply:
        """A drawn image, or what `answer` says."""
        return self.image(path) or self.answer(method, path, params, headers, body)

    def image(self, path: str) -> Reply | None:
        """The drawn images every server serves: /img/<i>.png and /img/<i>.jpg (with EXIF)."""
        name = path.rsplit("/", 1)[-1]
        stem, _, ext = name.partition(".")
        if not path.startswith("/img/") or not stem.isdigit():
            return None
        if ext == "png":
            return 200, "image/png", scene_png(int(stem))
        if ext == "jpg":
            return 200, "image/jpeg", scene_jpeg_with_exif(int(stem))
        return None


def _json(status: int, value: Any) -> Reply:
    return status, "application/json", json.dumps(value).encode()


# The site's pages: (path, page title, articles: (scene, article date, nearby text)).
GALLERY = ("/gallery", "Town gallery", [
    (0, RECENT[0], "The harbour office painted a new sign by the water."),
    (1, RECENT[1], "Visitors queue outside the museum on opening day."),
    (2, OLD, "An old photograph of the railway station from the archive."),
])  # fmt: skip
MARKET = ("/market", "Market square notices", [
    (3, "", "Hikers gather below the glacier at dawn."),
    (4, RECENT[2], "The bakery on the corner sells bread from six."),
    (5, RECENT[3], "Crowds fill the stadium for the derby."),
])  # fmt: skip


class ImageSite(FixtureServer):
    """The fixture site: `pages` (the gallery and market pages, then one that answers 404), each article
    a drawn scene with alt text (its title), a figcaption (its printed word and colour counts), a nearby
    paragraph and a `<time>` (scene 2's outside the window, scene 3 without one); the gallery also holds a
    40x40 image, an `<img>` whose URL answers HTML and one from the host off the allowlist. /moved
    redirects to that host."""

    def __init__(self, max_requests: int = 500, lifetime_s: float = 300.0) -> None:
        super().__init__(max_requests, lifetime_s)
        self.pages = [self.base_url + GALLERY[0], self.base_url + MARKET[0], self.base_url + "/gone"]
        self.redirects["/moved"] = self.offsite_url + "/img/7.png"

    def answer(self, method: str, path: str, params: dict[str, str], headers: Any, body: bytes) -> Reply:
        if path == "/tiny.png":
            return 200, "image/png", _tiny_png()
        if path == "/not-an-image":
            return 200, "text/html; charset=utf-8", b"<!doctype html><p>no picture here</p>"
        for page, title, articles in (GALLERY, MARKET):
            if path == page:
                return 200, "text/html; charset=utf-8", self._page(title, articles, extras=page == GALLERY[0])
        return 404, "text/plain", b"not found"

    def _page(self, title: str, articles: list[tuple[int, str, str]], extras: bool) -> bytes:
        parts = []
        for i, date, nearby in articles:
            scene = drawn_scene(i)
            counts = ", ".join(f"{n} {c}" for c, n in sorted(scene.counts.items()))
            when = f"<time datetime='{date}'>{date[:10]}</time>" if date else ""
            parts.append(f"<article>{when}<figure><img src='/img/{i}.png' alt='{scene_title(i)}' width='320' "
                         f"height='240'><figcaption>{scene.word}: {counts}</figcaption></figure><p>{nearby}</p>"
                         "</article>")
        if extras:
            parts.append("<p>Our logo <img src='/tiny.png' width='40' height='40' alt='logo'></p>")
            parts.append("<figure><img src='/not-an-image' width='200' height='150' alt='broken'>"
                         "<figcaption>a link that is no picture</figcaption></figure>")
            parts.append(f"<figure><img src='{self.offsite_url}/img/7.png' width='320' height='240' "
                         "alt='offsite volcano'><figcaption>from another host</figcaption></figure>")
        body = "".join(parts)
        return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{title}</title></head>"
                f"<body><h1>{title}</h1><main>{body}</main></body></html>").encode()


def _wanted(query: str, text: str) -> int:
    """How many of the query's words the text holds: how the stand-ins order their answers."""
    words = set(text.lower().split())
    return sum(w in words for w in set(query.lower().split()))


class SerperStandIn(FixtureServer):
    """Serper's POST /images: answers the `num` scenes of `scenes` whose titles share most words with
    `q`, each with imageUrl, title, link and source, and a `date` (inside the window, or OLD for scene 2;
    none for scene 3); scene 6 as a JPEG with EXIF, scene 7's imageUrl its HTML page (/article/7). A wrong
    X-API-KEY gets 403. `queries` holds the bodies."""

    def __init__(self, key: str, scenes: range = range(8), max_requests: int = 500, lifetime_s: float = 300.0) -> None:
        super().__init__(max_requests, lifetime_s)
        self.key = key
        self.scenes = scenes
        self.queries: list[dict[str, Any]] = []

    def result(self, i: int) -> dict[str, Any]:
        """The image result for scene `i`."""
        image = f"/article/{i}" if i == 7 else f"/img/{i}.{'jpg' if i == 6 else 'png'}"
        out = {"title": scene_title(i), "imageUrl": self.base_url + image, "imageWidth": 320,
               "imageHeight": 240, "link": f"{self.base_url}/article/{i}", "source": "Fixture News",
               "position": 0}
        if i != 3:
            out["date"] = OLD if i == 2 else RECENT[i % len(RECENT)]
        return out

    def answer(self, method: str, path: str, params: dict[str, str], headers: Any, body: bytes) -> Reply:
        if method == "GET" and path.startswith("/article/"):
            return 200, "text/html; charset=utf-8", b"<!doctype html><p>the article</p>"
        if method != "POST" or path != "/images":
            return _json(404, {"message": "no such endpoint"})
        if headers.get("X-API-KEY") != self.key:
            return _json(403, {"message": "Unauthorized.", "statusCode": 403})
        request = json.loads(body)
        self.queries.append(request)
        ranked = sorted(self.scenes, key=lambda i: (-_wanted(request.get("q", ""), scene_title(i)), i))
        images = [self.result(i) for i in ranked[: int(request.get("num", 10))]]
        for position, image in enumerate(images, 1):
            image["position"] = position
        return _json(200, {"searchParameters": {**request, "type": "images"}, "images": images})


class FlickrStandIn(FixtureServer):
    """Flickr's REST endpoint at /services/rest for flickr.photos.getRecent: the `per_page` latest of
    `scenes` (scene 2 uploaded OLD, the others inside the window; scene 5 has no image URL), with title,
    description, tags, dateupload (Unix seconds) and url_c / url_m. A wrong api_key gets Flickr's
    'stat: fail' answer. `queries` holds each request's parameters."""

    def __init__(self, key: str, scenes: range = range(8), max_requests: int = 500, lifetime_s: float = 300.0) -> None:
        super().__init__(max_requests, lifetime_s)
        self.key = key
        self.scenes = scenes
        self.rest_url = self.base_url + "/services/rest"
        self.queries: list[dict[str, str]] = []

    def photo(self, i: int) -> dict[str, Any]:
        """The photo record for scene `i`."""
        from datetime import datetime

        uploaded = OLD if i == 2 else RECENT[i % len(RECENT)]
        scene = drawn_scene(i)
        out = {"id": str(5000 + i), "owner": "12345@N00", "secret": "abc", "server": "1", "farm": 1,
               "title": scene_title(i), "ispublic": 1,
               "description": {"_content": f"A sign reading {scene.word} with {len(scene.shapes)} shapes."},
               "dateupload": str(int(datetime.fromisoformat(uploaded.replace("Z", "+00:00")).timestamp())),
               "tags": " ".join(sorted({"sign", scene.word.lower(), *scene.counts}))}
        if i != 5:
            out |= {"url_c": f"{self.base_url}/img/{i}.png", "width_c": 320, "height_c": 240}
        return out

    def answer(self, method: str, path: str, params: dict[str, str], headers: Any, body: bytes) -> Reply:
        if path != "/services/rest":
            return _json(404, {"stat": "fail", "code": 0, "message": "no such endpoint"})
        self.queries.append(params)
        if params.get("api_key") != self.key:
            return _json(200, {"stat": "fail", "code": 100, "message": "Invalid API Key (Key has invalid format)"})
        if params.get("method") != "flickr.photos.getRecent":
            return _json(200, {"stat": "fail", "code": 112, "message": f"Method \"{params.get('method')}\" not found"})
        per_page = int(params.get("per_page", 100))
        photos = [self.photo(i) for i in list(self.scenes)[:per_page]]
        return _json(200, {"photos": {"page": 1, "pages": 1, "perpage": per_page, "total": len(photos),
                                      "photo": photos}, "stat": "ok"})
