"""The review sheet of a new version in the real Chromium: a seeded 10% of each atomic task's questions (at
least one), each with its image, question, options, generated answer, plan steps with their tool outputs
and the verifier's answer, every text shown as text; the reviewer's correct / incorrect decisions are
saved as a file that `read_review` turns into the correctness rate, overall and per atomic task."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from evolve_benchmarks import accepted_items, save_mmbench_dev
from playwright.sync_api import sync_playwright

from fastmmeval.errors import ConfigError
from fastmmeval.evolve.benchmark import load_benchmark
from fastmmeval.evolve.dataset import export_version
from fastmmeval.evolve.review import read_review, sample_size, write_review_sheet
from fastmmeval.live.store import Blobs
from fastmmeval.tasks.sources import DATA_DIR_ENV

HOSTILE = '<img src=x onerror="document.title=\'pwned\'"></script><script>document.title="pwned"</script>'


@pytest.fixture
def version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """mmbench_en_dev_live_v1 with 20 + 10 + 10 questions, every question and tool output hostile markup."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    save_mmbench_dev(tmp_path / "data", {"ocr": 4, "image_scene": 2, "spatial_relationship": 2})
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    blobs = Blobs(tmp_path / "blobs")
    accepted = accepted_items(blobs, {"ocr": 20, "image_scene": 10, "spatial_relationship": 10})
    for verified, _ in accepted:
        verified.generated["question"] += f" {HOSTILE}"
        verified.observations[0] += f" {HOSTILE}"
    return export_version(load_benchmark("mmbench_en_dev"), accepted, blobs, tmp_path / "v1", 1, manifest={})


def test_sample_sizes_are_a_tenth_rounded_at_least_one() -> None:
    assert [sample_size(n, 0.1) for n in (1, 4, 5, 14, 15, 20, 1000)] == [1, 1, 1, 1, 2, 2, 100]


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium")
def test_the_review_sheet_in_chromium_and_its_correctness_rate(version: Path, tmp_path: Path) -> None:
    sheet = write_review_sheet(version, tmp_path / "review.html")
    text = sheet.read_text()
    assert HOSTILE not in text and "&lt;script&gt;document.title=" in text
    assert write_review_sheet(version, tmp_path / "again.html").read_bytes() == sheet.read_bytes()
    other = write_review_sheet(version, tmp_path / "other.html", seed=1).read_text()
    assert other != text  # another seed, another sample

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"))
        page = browser.new_page(accept_downloads=True)
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.goto(sheet.as_uri())
        title = "mmbench_en_dev_live_v1 review: 4 of 40 items (10% per atomic task, seed 0)"
        assert page.title() == title  # no injected script ran
        items = page.locator("article.item")
        assert items.count() == 4
        tasks = [items.nth(k).get_attribute("data-task") for k in range(4)]
        assert sorted(tasks) == ["image_scene", "ocr", "ocr", "spatial_relationship"]
        first = items.first
        fields = dict(zip(first.locator("dt").all_inner_texts(), first.locator("dd").all_inner_texts(), strict=True))
        assert fields["Question"].endswith(f"? {HOSTILE}")
        letter = fields["Generated answer"][0]
        assert fields["Options"].splitlines()[0].startswith("A. ")
        assert fields["Generated answer"][3:] in fields["Options"]
        assert fields["Verifier's answer"] == f"{letter} (agrees with the generated answer)"
        step = first.locator("ol.plan li").inner_text()
        assert step.startswith("1. count_colour(colour=red) — count the red shapes")
        assert f"red regions {HOSTILE}" in step
        assert fields["Models"] == "generator gen-a, verifier blind-v"
        thumb = first.locator("img.thumb")
        thumb.click()
        assert page.locator("#viewer img").evaluate("img => [img.naturalWidth, img.naturalHeight]") == [320, 240]
        page.locator("#viewer").click()
        assert page.locator("#tally").inner_text() == "0 correct, 0 incorrect, 4 undecided"
        for k in range(3):
            items.nth(k).locator("input[value=correct]").click()
        wrong = items.nth(3)
        wrong.locator("input[value=incorrect]").click()
        assert page.locator("#tally").inner_text() == "3 correct, 1 incorrect, 0 undecided"
        with page.expect_download() as download:
            page.locator("#save").click()
        assert download.value.suggested_filename == "review.json"
        saved = tmp_path / "review.json"
        download.value.save_as(saved)
        wrong_task = wrong.get_attribute("data-task")
        browser.close()
    assert all(url.startswith(("file:", "data:", "blob:")) for url in requests), requests

    result = read_review(saved)
    assert (result.task, result.seed, result.fraction) == ("mmbench_en_dev_live_v1", 0, 0.1)
    assert (result.overall.correct, result.overall.incorrect, result.overall.undecided) == (3, 1, 0)
    assert result.overall.rate == 0.75
    assert set(result.by_task) == {"image_scene", "ocr", "spatial_relationship"}
    expected = {t: (0.5 if t == wrong_task == "ocr" else 0.0 if t == wrong_task else 1.0) for t in result.by_task}
    assert {t: tally.rate for t, tally in result.by_task.items()} == expected


def test_bad_review_files_and_versions_are_one_line_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps({"format": "fastmmeval.evolve-review", "items": {"ab": {"task": "ocr", "decision": "maybe"}}})
    )
    with pytest.raises(ConfigError, match=r"bad.json: items\['ab'\]: expected \{task, decision"):
        read_review(bad)
    bad.write_text(json.dumps({"decisions": {}}))
    with pytest.raises(ConfigError, match="expected a review sheet's file"):
        read_review(bad)
    with pytest.raises(ConfigError, match="not a version written by fastmmeval evolve"):
        write_review_sheet(tmp_path, tmp_path / "review.html")
    with pytest.raises(ConfigError, match=r"the fraction reviewed is in \(0, 1\]"):
        write_review_sheet(tmp_path, tmp_path / "review.html", fraction=0)
