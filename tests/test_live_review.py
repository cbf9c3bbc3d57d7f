"""The LiveBench review page in the real Chromium: it loads nothing, shows what the models wrote as text
(never as markup), defaults each item to the selection, opens the full screenshot on click, and saves the
reviewer's accept/reject decisions as a file that `export_month` honours."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from live_items import capture, item, month_items
from playwright.sync_api import sync_playwright

from fastmmeval.live.dataset import export_month, load_month
from fastmmeval.live.records import SUBTASKS
from fastmmeval.live.review import read_decisions, review_page
from fastmmeval.live.select import select_items
from fastmmeval.live.store import Blobs

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium")

HOSTILE = '<img src=x onerror="document.title=\'pwned\'"></script><script>document.title="pwned"</script>'


def test_review_decisions_reach_the_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    blobs = Blobs(tmp_path / "blobs")
    items = month_items(blobs)
    hostile = item(capture(blobs, headline="Odd page"), 0, SUBTASKS[1], f"What does {HOSTILE} mean?", reason=HOSTILE)
    items.append(hostile)
    selection = select_items(items, threshold=6, size=100, seed=0)
    low = next(i.id for i in items if i.id not in selection.kept)
    kept = selection.kept[0]
    page_file = review_page(items, blobs, tmp_path / "review.html", selection)
    text = page_file.read_text()
    assert HOSTILE not in text and "What does &lt;img src=x onerror=" in text

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"))
        page = browser.new_page(accept_downloads=True)
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.goto(page_file.as_uri())
        assert page.title() == f"LiveBench review: {len(items)} items"  # no injected script ran
        assert page.locator("article.item").count() == len(items)
        assert page.locator(f"#item-{hostile.id} dd").first.inner_text() == f"What does {HOSTILE} mean?"

        def choice(item_id: str) -> str:
            return page.locator(f"#item-{item_id} input[type=radio]:checked").get_attribute("value") or ""

        assert choice(kept) == "accept" and choice(low) == "reject"
        assert "not selected: score 3 < threshold 6" in page.locator(f"#item-{low} .status").inner_text()

        thumb = page.locator(f"#item-{kept} img.thumb").first
        assert thumb.evaluate("img => img.naturalWidth") == 360  # a thumbnail in the page
        thumb.click()
        assert page.locator("#viewer").is_visible()
        assert page.locator("#viewer img").evaluate("img => [img.naturalWidth, img.naturalHeight]") == [1024, 1024]
        page.locator("#viewer").click()
        assert page.locator("#viewer").is_hidden()

        page.locator(f"#item-{kept} input[value=reject]").click()
        page.locator(f"#item-{low} input[value=accept]").click()
        accepted = len(selection.kept)  # one kept item rejected, one dropped item accepted
        assert page.locator("#tally").inner_text() == f"{accepted} accepted, {len(items) - accepted} rejected"
        with page.expect_download() as download:
            page.locator("#save").click()
        assert download.value.suggested_filename == "decisions.json"
        saved = tmp_path / "decisions.json"
        download.value.save_as(saved)
        browser.close()
    assert all(url.startswith(("file:", "data:", "blob:")) for url in requests), requests

    decisions = read_decisions(saved)
    assert json.loads(saved.read_text())["format"] == "fastmmeval.live-decisions"
    assert set(decisions) == {i.id for i in items}
    assert {k for k, d in decisions.items() if d == "accept"} == set(selection.kept) - {kept} | {low}

    manifest = {"month": "2025-01", "prompts": {"generate@1": "00" * 32}}
    out = export_month(items, blobs, "2025-01", tmp_path / "2025-01", manifest, decisions, selection=selection)
    assert set(load_month(out)["item_id"]) == set(selection.kept) - {kept} | {low}
    export = json.loads((out / "manifest.json").read_text())["export"]
    assert (export["accepted"], export["rejected"]) == ([low], [kept])
