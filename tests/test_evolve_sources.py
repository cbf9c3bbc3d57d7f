"""The evolve image sources on local fixtures: a folder and its manifest, a site crawled by the real
Chromium, stand-ins for Serper and Flickr; ranking by the query, the recency window, the image caps, EXIF
stripped, API keys kept out of everything; then perceptual duplicates and near-copies of the original
benchmark's images dropped."""

from __future__ import annotations

import io
import json
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest
from evolve_images import drawn_scene, write_folder
from evolve_servers import (
    EXIF_MAKE,
    NOW,
    OLD,
    FlickrStandIn,
    ImageSite,
    SerperStandIn,
    scene_jpeg_with_exif,
    scene_title,
)
from PIL import Image

from fastmmeval.errors import ConfigError
from fastmmeval.evolve.dedupe import NearCopies, drop_duplicates
from fastmmeval.evolve.executors import open_source
from fastmmeval.evolve.fetch import FetchError, http_get
from fastmmeval.evolve.sanitize import ImageCaps
from fastmmeval.evolve.sources import Retrieved, SourceError, iso_utc, parse_time, rank
from fastmmeval.live.store import Blobs

KEY = "sk-fixture-0123456789abcdef"
WORDS = [drawn_scene(i).word for i in range(12)]


@pytest.fixture
def blobs(tmp_path: Path) -> Blobs:
    return Blobs(tmp_path / "blobs")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "images"
    write_folder(root, 12)
    return root


def words(found: Retrieved) -> list[str]:
    """The printed word of each candidate's scene, from its title or alt text ('Sign Museum with shapes',
    'Museum sign with red shapes')."""
    return [next(w for w in WORDS if w.title() in f"{c.title} {c.context}") for c in found]


def reasons(found: Retrieved) -> dict[str, str]:
    return {d["url"].rsplit("/", 1)[-1]: d["reason"] for d in found.dropped}


# --- folder ---------------------------------------------------------------------------------------------


def test_a_folder_ranks_by_the_query_and_keeps_its_manifest_order_for_ties(folder: Path, blobs: Blobs) -> None:
    source = open_source("folder", root=folder, now=NOW)
    assert words(source.retrieve("", 4, blobs)) == WORDS[:4]  # the empty query: manifest order
    museum = source.retrieve("the MUSEUM sign", 3, blobs)
    assert words(museum)[0] == "MUSEUM" and len(museum) == 3
    glacier = source.retrieve("glacier", 3, blobs)
    assert words(glacier)[0] == "GLACIER"
    assert [c.sha for c in glacier] != [c.sha for c in museum]  # a rewritten query retrieves other images
    assert [c.record() for c in source.retrieve("the MUSEUM sign", 3, blobs)] == [c.record() for c in museum]
    first = museum[0]
    assert (first.source, first.suffix, first.width, first.height, first.query) == (
        "folder", ".png", 320, 240, "the MUSEUM sign")
    assert first.title == "Sign Museum with shapes" and "MUSEUM" in first.context
    assert first.uploaded_at == "2026-02-15T12:00:00Z" and len(first.phash) == 16
    assert Image.open(blobs.path(first.sha, first.suffix)).size == (320, 240)


def test_rank_counts_distinct_query_words_casefolded() -> None:
    texts = ["red circle", "Blue square, RED", "scene_003.png red"]
    assert rank("red blue", texts) == [1, 0, 2]
    assert rank("003", texts) == [2, 0, 1]  # '_' splits a file name's words
    assert rank("", texts) == [0, 1, 2]


@pytest.mark.parametrize(("text", "when"), [
    ("2026-03-05T12:00:00Z", "2026-03-05T12:00:00Z"),
    ("2026-03-05T14:00:00+02:00", "2026-03-05T12:00:00Z"),
    ("2026-03-05", "2026-03-05T00:00:00Z"),
    ("1772712000", "2026-03-05T12:00:00Z"),
    ("Mar 5, 2026", "2026-03-05T00:00:00Z"),
    ("3 days ago", "2026-11-28T00:00:00Z"),
])  # fmt: skip
def test_upload_dates_in_the_forms_sources_give(text: str, when: str) -> None:
    assert iso_utc(parse_time(text, parse_time(NOW, datetime.now(timezone.utc)))) == when
    assert parse_time("last spring", datetime.now(timezone.utc)) is None


def test_the_window_keeps_the_last_year(folder: Path, blobs: Blobs) -> None:
    lines = (folder / "manifest.jsonl").read_text().splitlines()
    old = json.loads(lines[1]) | {"uploaded_at": OLD}
    undated = json.loads(lines[2]) | {"uploaded_at": ""}
    (folder / "manifest.jsonl").write_text("\n".join([lines[0], json.dumps(old), json.dumps(undated)]) + "\n")
    found = open_source("folder", root=folder, now=NOW).retrieve("", 5, blobs)
    assert [c.title for c in found] == ["Sign Harbour with shapes", "Sign Railway with shapes"]
    assert found[1].uploaded_at == ""  # a folder keeps an image without a date
    assert found.dropped == [{"url": "scene_001.png",
                              "reason": "uploaded 2024-05-01T10:00:00Z, over 365 days before 2026-12-01T00:00:00Z"}]
    assert len(open_source("folder", root=folder, now=NOW, window_days=None).retrieve("", 5, blobs)) == 3


def test_a_csv_manifest_and_a_bare_folder(tmp_path: Path, blobs: Blobs) -> None:
    root = tmp_path / "csv"
    write_folder(root, 3)
    (root / "manifest.jsonl").unlink()
    (root / "manifest.csv").write_text("file,title,context,uploaded_at,url\n"
                                       "scene_002.png,Railway at noon,,2026-05-01,https://example.org/r\n"
                                       "scene_000.png,Harbour,boats,,\n")
    found = open_source("folder", root=root / "manifest.csv", now=NOW).retrieve("boats", 5, blobs)
    assert [c.title for c in found] == ["Harbour", "Railway at noon"]
    assert found[1].url == "https://example.org/r" and found[1].uploaded_at == "2026-05-01T00:00:00Z"
    (root / "manifest.csv").unlink()
    bare = open_source("folder", root=root, now=NOW).retrieve("scene 001", 5, blobs)
    assert [c.url for c in bare] == ["scene_001.png", "scene_000.png", "scene_002.png"]


@pytest.mark.parametrize(("line", "message"), [
    ({"file": "../outside.png"}, r"manifest.jsonl:2: file '../outside.png' is outside the folder .*images; "
                                 "manifest paths stay inside it"),
    ({"file": "/etc/passwd"}, r"manifest.jsonl:2: file '/etc/passwd' is outside the folder"),
    ({"file": "nope.png"}, r"manifest.jsonl:2: file 'nope.png' does not exist in"),
    ({"file": "scene_000.png", "uploaded_at": "last spring"}, "manifest.jsonl:2: uploaded_at 'last spring' is not"),
    ({"title": "no file"}, "manifest.jsonl:2: no `file`"),
    ({"file": "scene_000.png", "title": 3}, r"manifest.jsonl:2: `title` must be a string, got 3"),
])  # fmt: skip
def test_a_bad_manifest_line_is_one_error_naming_it(folder: Path, line: dict[str, object], message: str) -> None:
    (folder.parent / "outside.png").write_bytes((folder / "scene_000.png").read_bytes())
    first = (folder / "manifest.jsonl").read_text().splitlines()[0]
    (folder / "manifest.jsonl").write_text(f"{first}\n{json.dumps(line)}\n")
    with pytest.raises(ConfigError, match=message):
        open_source("folder", root=folder)


def test_the_fingerprint_follows_the_manifest_and_the_window(folder: Path) -> None:
    one = open_source("folder", root=folder, now=NOW).fingerprint()
    assert one == open_source("folder", root=folder, now=NOW).fingerprint()
    assert one["until"] == "2026-12-01" and one["window_days"] == 365
    assert open_source("folder", root=folder, now=NOW, window_days=30).fingerprint() != one
    with (folder / "manifest.jsonl").open("a") as f:
        f.write(json.dumps({"file": "scene_000.png", "title": "again"}) + "\n")
    assert open_source("folder", root=folder, now=NOW).fingerprint()["manifest"] != one["manifest"]


# --- caps, refusals, metadata ---------------------------------------------------------------------------


def test_caps_and_non_images_are_dropped_with_reasons(tmp_path: Path, blobs: Blobs) -> None:
    root = tmp_path / "caps"
    root.mkdir()
    drawn_scene(0).image.save(root / "a_ok.png")
    drawn_scene(1).image.resize((1200, 900)).save(root / "b_large.png")
    Image.new("RGB", (300, 60), "white").save(root / "c_thin.png")
    (root / "d_text.png").write_text("<html>not a picture</html>")
    (root / "e_heavy.bmp").write_bytes(b"BM" + b"\0" * 600_000)
    caps = ImageCaps(max_bytes=500_000, max_pixels=1_000_000)
    found = open_source("folder", root=root, caps=caps).retrieve("", 5, blobs)
    assert [c.url for c in found] == ["a_ok.png"]
    why = reasons(found)
    assert why.pop("d_text.png").startswith("not a decodable image (UnidentifiedImageError: cannot identify")
    assert why == {
        "b_large.png": "1200x900 pixels, over the cap of 1,000,000",
        "c_thin.png": "300x60 pixels, a side under 80",
        "e_heavy.bmp": "600,002 bytes, over the cap of 500,000",
    }


def test_a_decompression_bomb_is_refused(folder: Path, blobs: Blobs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 20_000)  # so the 320x240 scenes look like bombs to PIL
    found = open_source("folder", root=folder, caps=ImageCaps(max_pixels=10**9), now=NOW).retrieve("", 2, blobs)
    assert found == [] and all(d["reason"].startswith("a decompression bomb") for d in found.dropped)


def test_exif_is_stripped(tmp_path: Path, blobs: Blobs) -> None:
    root = tmp_path / "exif"
    root.mkdir()
    data = scene_jpeg_with_exif(4)
    assert Image.open(io.BytesIO(data)).getexif()[0x010F] == EXIF_MAKE
    (root / "photo.jpg").write_bytes(data)
    [clean] = open_source("folder", root=root).retrieve("", 1, blobs)
    out = blobs.get(clean.sha, clean.suffix)
    assert clean.suffix == ".jpg" and EXIF_MAKE.encode() not in out and b"Exif" not in out
    image = Image.open(io.BytesIO(out))
    assert len(image.getexif()) == 0 and image.size == (320, 240) and "icc_profile" not in image.info


def test_the_same_bytes_twice_are_one_candidate(folder: Path, blobs: Blobs) -> None:
    with (folder / "manifest.jsonl").open("a") as f:
        f.write(json.dumps({"file": "scene_000.png", "title": "Sign Harbour again"}) + "\n")
    found = open_source("folder", root=folder, now=NOW).retrieve("harbour", 2, blobs)
    assert len({c.sha for c in found}) == 2
    assert {"url": "scene_000.png", "reason": "the same bytes as a candidate above"} in found.dropped


@pytest.mark.parametrize(("kind", "options", "message"), [
    ("bing", {}, "evolve source 'bing': expected one of folder, crawl, serper, flickr"),
    ("folder", {"root": ".", "depth": 2}, "evolve source folder: unknown option 'depth' .its options: root, "),
    ("folder", {"root": "/no/such/folder"}, "evolve source folder: /no/such/folder: no such folder"),
    ("folder", {"root": ".", "window_days": 0}, "window_days must be at least 1, got 0"),
    ("crawl", {"sites": ["ftp://example.org/"]}, "site 'ftp://example.org/' is not an http.s. URL"),
])  # fmt: skip
def test_bad_source_options_are_one_line(kind: str, options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        open_source(kind, **options)


# --- crawl ----------------------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium")
def test_a_crawl_collects_the_sites_images_with_their_text(blobs: Blobs) -> None:
    with ImageSite() as site:
        source = open_source("crawl", sites=site.pages, now=NOW, idle_cap_s=1.0)
        found = source.retrieve("glacier", 10, blobs)
        pages_visited = [h for h in site.hits if h[2] in ("/gallery", "/market")]
        bakery = source.retrieve("bakery bread", 2, blobs)
        assert [h for h in site.hits if h[2] in ("/gallery", "/market")] == pages_visited  # crawled once
    assert words(found) == ["GLACIER", "HARBOUR", "MUSEUM", "BAKERY", "STADIUM"]
    assert words(bakery) == ["BAKERY", "HARBOUR"]
    glacier = found[0]
    assert glacier.source == "crawl" and glacier.page_url == site.pages[1] and glacier.title == "Market square notices"
    counts = ", ".join(f"{n} {c}" for c, n in sorted(drawn_scene(3).counts.items()))
    assert glacier.context.splitlines() == [scene_title(3), f"GLACIER: {counts}",  # alt, figcaption, nearby
                                            "Hikers gather below the glacier at dawn."]
    assert glacier.uploaded_at == "" and found[1].uploaded_at == "2026-03-15T12:00:00Z"
    assert reasons(found) == {
        "gone": "page: HTTP 404",
        "tiny.png": "rendered at 40x40 px, a side under 80",
        "not-an-image": "the browser could not show it (not an image, or refused)",
        "7.png": "host 'localhost' is not on the allowlist",
        "2.png": "uploaded 2024-05-01T10:00:00Z, over 365 days before 2026-12-01T00:00:00Z",
    }
    assert not [h for h in site.hits if h[1].startswith("localhost")]  # neither the browser nor a fetch went there
    fingerprint = source.fingerprint()
    assert fingerprint["sites"] == site.pages and fingerprint["allow_hosts"] == ["127.0.0.1"]


def test_fetches_keep_to_the_allowlist_and_the_size_cap() -> None:
    with ImageSite() as site:
        allowed = frozenset({"127.0.0.1"})
        assert http_get(f"{site.base_url}/img/0.png", 1 << 20, 5, allowed).content_type == "image/png"
        with pytest.raises(FetchError, match="^redirected: host 'localhost' is not on the allowlist$"):
            http_get(f"{site.base_url}/moved", 1 << 20, 5, allowed)
        with pytest.raises(FetchError, match="^host 'localhost' is not on the allowlist$"):
            http_get(f"{site.offsite_url}/img/0.png", 1 << 20, 5, allowed)
        with pytest.raises(FetchError, match=r"^\d[\d,]+ bytes, over the cap of 1,000$"):
            http_get(f"{site.base_url}/img/0.png", 1000, 5, allowed)
        with pytest.raises(FetchError, match="^HTTP 404$"):
            http_get(f"{site.base_url}/gone", 1000, 5, allowed)
        with pytest.raises(FetchError, match="^not an http.s. URL: 'file:///etc/passwd'$"):
            http_get("file:///etc/passwd", 1000, 5)
    assert not [h for h in site.hits if h[1].startswith("localhost")]


# --- the search APIs ------------------------------------------------------------------------------------


def test_serper_posts_the_query_and_keeps_the_recent_images(blobs: Blobs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERPER_API_KEY", KEY)
    with SerperStandIn(KEY) as serper:
        source = open_source("serper", base_url=serper.base_url, now=NOW)
        found = source.retrieve("railway blue", 4, blobs)
        page = source.retrieve("volcano", 1, blobs)
        strict = open_source("serper", base_url=serper.base_url, now=NOW, keep_undated=False)
        dated = strict.retrieve("glacier", 1, blobs)
    assert [q["q"] for q in serper.queries] == ["railway blue", "volcano", "glacier"]
    assert serper.queries[0] == {"q": "railway blue", "num": 4, "tbs": "qdr:y"}
    assert words(found) == ["MUSEUM", "GLACIER", "BAKERY"]  # the stand-in's order; RAILWAY's image is too old
    assert reasons(found) == {"2.png": "uploaded 2024-05-01T10:00:00Z, over 365 days before 2026-12-01T00:00:00Z"}
    assert all(c.source == "serper" and c.page_url.startswith(serper.base_url + "/article/") for c in found)
    assert page == [] and reasons(page) == {"7": "content type text/html, not an image"}
    assert dated == [] and reasons(dated) == {"3.png": "no upload date (this source keeps dated images only)"}
    for record in (source.fingerprint(), [c.record() for c in found], found.dropped, repr(source)):
        assert KEY not in json.dumps(record)


def test_serper_strips_exif_from_what_it_fetches(blobs: Blobs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERPER_API_KEY", KEY)
    with SerperStandIn(KEY, scenes=range(6, 7)) as serper:
        [photo] = open_source("serper", base_url=serper.base_url, now=NOW).retrieve("", 1, blobs)
    assert photo.suffix == ".jpg" and EXIF_MAKE.encode() not in blobs.get(photo.sha, ".jpg")


def test_flickr_ranks_the_recent_uploads_by_the_query(blobs: Blobs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLICKR_API_KEY", KEY)
    with FlickrStandIn(KEY) as flickr:
        source = open_source("flickr", base_url=flickr.rest_url, now=NOW, pool=8)
        volcano = source.retrieve("volcano", 3, blobs)
        harbour = source.retrieve("harbour sign", 3, blobs)
    assert len(flickr.queries) == 1  # the recent uploads are asked for once
    assert flickr.queries[0] == {"method": "flickr.photos.getRecent", "api_key": KEY, "per_page": "8",
                                 "extras": "date_upload,description,tags,url_c,url_m", "format": "json",
                                 "nojsoncallback": "1"}
    assert words(volcano) == ["VOLCANO", "HARBOUR", "MUSEUM"] and words(harbour)[0] == "HARBOUR"
    assert reasons(volcano) == {"5005": "no image URL (url_c, url_m)"}
    assert "2.png" in reasons(harbour) and reasons(harbour)["2.png"].startswith("uploaded 2024-05-01T10:00:00Z")
    assert volcano[0].page_url == "https://www.flickr.com/photos/12345@N00/5007"
    assert "tags: " in volcano[0].context and volcano[0].uploaded_at == "2026-11-02T09:00:00Z"
    for record in (source.fingerprint(), [c.record() for c in volcano], volcano.dropped, repr(source)):
        assert KEY not in json.dumps(record)


@pytest.mark.parametrize(("kind", "env"), [("serper", "SERPER_API_KEY"), ("flickr", "FLICKR_API_KEY")])
def test_a_missing_key_names_the_variable(kind: str, env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(env, raising=False)
    with pytest.raises(ConfigError, match=f"^the evolve source {kind} needs an API key: set the environment "
                                          f"variable {env}$"):
        open_source(kind)


def test_a_refused_key_is_an_error_that_does_not_show_it(blobs: Blobs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERPER_API_KEY", KEY)
    monkeypatch.setenv("FLICKR_API_KEY", KEY)
    with SerperStandIn("another") as serper, FlickrStandIn("another") as flickr:
        with pytest.raises(SourceError, match=r"^serper: http://127\.0\.0\.1:\d+/images: HTTP 403$") as refused:
            open_source("serper", base_url=serper.base_url).retrieve("x", 1, blobs)
        with pytest.raises(SourceError, match="^flickr: .*: the API answered Invalid API Key") as invalid:
            open_source("flickr", base_url=flickr.rest_url).retrieve("x", 1, blobs)
    assert KEY not in str(refused.value) and KEY not in str(invalid.value)


def test_an_api_that_answers_nonsense_is_one_error(blobs: Blobs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERPER_API_KEY", KEY)
    monkeypatch.setenv("FLICKR_API_KEY", KEY)
    with ImageSite() as site:
        with pytest.raises(SourceError, match=r"^serper: http://127\.0\.0\.1:\d+/images: HTTP 404$"):
            open_source("serper", base_url=site.base_url).retrieve("x", 1, blobs)
        with pytest.raises(SourceError, match=r"^flickr: http://127\.0\.0\.1:\d+/gallery: the reply is not JSON"):
            open_source("flickr", base_url=site.base_url + "/gallery").retrieve("x", 1, blobs)


# --- duplicates and near-copies -------------------------------------------------------------------------


def _copy(image: Image.Image) -> bytes:
    """A resized, JPEG re-encoded copy."""
    out = io.BytesIO()
    image.resize((256, 192), Image.Resampling.BILINEAR).save(out, format="JPEG", quality=60)
    return out.getvalue()


@pytest.fixture
def acquired(tmp_path: Path, blobs: Blobs) -> list:
    """Candidates: drawn scenes 20-23, a copy of scene 20 and a copy of original scene 2."""
    root = tmp_path / "acquired"
    write_folder(root, 4, start=20)
    (root / "copy_of_20.jpg").write_bytes(_copy(drawn_scene(20).image))
    (root / "copy_of_original_2.jpg").write_bytes(_copy(drawn_scene(2).image))
    lines = (root / "manifest.jsonl").read_text() + "".join(
        json.dumps({"file": f}) + "\n" for f in ("copy_of_20.jpg", "copy_of_original_2.jpg"))
    (root / "manifest.jsonl").write_text(lines)
    return list(open_source("folder", root=root, now=NOW).retrieve("", 10, blobs))


def test_perceptual_duplicates_keep_the_first(acquired: list, blobs: Blobs) -> None:
    kept, dropped = drop_duplicates(acquired, blobs)
    assert [c.sha for c in kept] == [c.sha for c in acquired[:4]] + [acquired[5].sha]
    assert dropped[0]["sha"] == acquired[4].sha
    assert dropped[0]["reason"].startswith(f"a perceptual duplicate of {acquired[0].sha[:12]} (")
    assert len(drop_duplicates(acquired, blobs, max_distance=64)[0]) == 1  # the distance is the threshold


def test_near_copies_of_the_original_benchmark_are_dropped(acquired: list, blobs: Blobs) -> None:
    originals = NearCopies.from_images((f"doc{i}", drawn_scene(i).image) for i in range(8))
    assert originals.is_copy(drawn_scene(21).image) is None
    kept, dropped = drop_duplicates(acquired, blobs, originals)
    assert [c.sha for c in kept] == [c.sha for c in acquired[:4]]
    assert dropped[1]["sha"] == acquired[5].sha
    assert dropped[1]["reason"].startswith("a near-copy of image 'doc2' of the 8 original images (")


def test_near_copies_from_a_contamination_index(tmp_path: Path) -> None:
    from fastmmeval.contam.ngram.index import NgramIndex
    from fastmmeval.contam.ngram.settings import IndexSettings
    from fastmmeval.contam.readers import choose_tokenizers, open_sources

    root = tmp_path / "originals"
    write_folder(root, 6)
    shard = root / "bench.jsonl"
    shard.write_text("".join(json.dumps({"id": f"doc{i}", "text": "question", "image": f"scene_{i:03d}.png"}) + "\n"
                             for i in range(6)))
    tokenizers = choose_tokenizers()
    index = NgramIndex.create(tmp_path / "index", IndexSettings(threads=1), tokenizers.describe())
    index.add(open_sources([str(shard)], "auto", tokenizers.text, tokenizers.image, root), progress=False)
    originals = NearCopies.from_index(tmp_path / "index")
    copy = Image.open(io.BytesIO(_copy(drawn_scene(3).image)))
    assert originals.is_copy(copy).startswith(f"a near-copy of an image in the contamination index {tmp_path}")
    assert originals.is_copy(drawn_scene(30).image) is None
