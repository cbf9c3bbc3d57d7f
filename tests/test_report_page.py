"""`fastmmeval report` in the real browser (Playwright driving Debian's chromium, the file opened from disk): the
summary, breakdown charts, a planted difference reported significant and a null one not, protocol mismatches
refused, Lite and contamination shown beside the scores, every value escaped."""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from report_runs import write_run

from fastmmeval.cli import main
from fastmmeval.report.page import script_json

needs_chromium = pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium is not installed")


@contextmanager
def opened(path: Path) -> Iterator[tuple[Any, list[str]]]:
    """The report open in chromium once its charts are drawn, and the console errors and page errors seen."""
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"))
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("dialog", lambda d: (errors.append(f"dialog: {d.message}"), d.dismiss()))
        page.goto(path.resolve().as_uri())
        page.wait_for_selector("body[data-charts-ready='1']", timeout=20_000)
        try:
            yield page, errors
        finally:
            browser.close()


def report(tmp_path: Path, *args: str) -> tuple[int, Path]:
    out = tmp_path / "report.html"
    return main(["report", *args, "--out", str(out), "--bootstrap_iters", "2000"]), out


@needs_chromium
def test_two_runs_compared_in_the_browser(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write_run(tmp_path / "base", 0.55, seed=1)
    better = write_run(tmp_path / "better", 0.80, seed=2)
    status, out = report(tmp_path, str(base), str(better))
    assert status == 0 and f"report: {out}" in capsys.readouterr().out
    assert "cdn" not in out.read_text().lower().split("<script>")[0]  # styles and scripts inlined, none fetched
    with opened(out) as (page, errors):
        row = page.locator("table.comparison tbody tr")
        assert row.count() == 1 and "significant" in row.get_attribute("class")
        assert row.locator("td").nth(9).inner_text() == "significant"
        assert page.locator("#breakdown-charts .main-svg").count() >= 2  # one chart per run
        assert page.locator("#efficiency-chart .main-svg").count() >= 1
        assert page.locator("table.summary").first.inner_text().count("vqa") == 1
        png = page.screenshot(full_page=True)
        assert errors == []
    colours = Image.open(io.BytesIO(png)).convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is None or len(colours) > 50  # drawn, not blank


@needs_chromium
def test_a_null_difference_says_not_significant(tmp_path: Path) -> None:
    base = write_run(tmp_path / "base", 0.6, seed=1)
    same = write_run(tmp_path / "same", 0.6, seed=1, model_args="step=2")
    status, out = report(tmp_path, str(base), str(same))
    assert status == 0
    with opened(out) as (page, errors):
        assert page.locator("table.comparison tbody tr td").nth(9).inner_text() == "not significant"
        assert errors == []


def test_runs_of_different_protocols_are_refused_unless_allowed(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    protocol = {"generation": {"max_new_tokens": 16}, "split": "test"}
    base = write_run(tmp_path / "base", 0.6, protocol=protocol)
    other = write_run(tmp_path / "other", 0.6, fingerprint="b" * 16,
                      protocol={"generation": {"max_new_tokens": 64}, "split": "test"})
    status, _ = report(tmp_path, str(base), str(other))
    err = capsys.readouterr().err
    assert status == 1 and "generation.max_new_tokens" in err and err.count("\n") == 1
    status, out = report(tmp_path, str(base), str(other), "--allow_mismatch")
    assert status == 0 and "generation.max_new_tokens" in out.read_text()


@needs_chromium
def test_lite_and_contamination_are_shown_beside_the_scores(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", 0.6)
    lite = tmp_path / "lite_validation.json"
    lite.write_text(json.dumps({"tasks": [{"task": "vqa", "metric": "exact_match", "keep_full": False,
                                           "correlations": {"pearson": 0.97},
                                           "scores": {"a": {"full": 60.0, "lite": 61.0},
                                                      "b": {"full": 70.0, "lite": 69.0},
                                                      "c": {"full": 80.0, "lite": 82.0}}}]}))
    contam = tmp_path / "scan"
    contam.mkdir()
    (contam / "contam_report.json").write_text(json.dumps({"tasks": {"vqa": {
        "instances": 300, "any_overlap_share": 0.23, "text_overlap_share": 0.2, "image_overlap_share": 0.05,
        "near_duplicate_share": None}}}))
    status, out = report(tmp_path, str(run), "--lite", str(lite), "--contam", str(contam))
    assert status == 0
    with opened(out) as (page, errors):
        assert "23.0% overlapped" in page.locator("table.summary").inner_text()
        assert page.locator("#lite-charts .main-svg").count() >= 1
        assert page.locator("#contam-chart .main-svg").count() >= 1
        assert errors == []


@needs_chromium
def test_every_value_is_escaped(tmp_path: Path) -> None:
    evil = "<script>alert(1)</script></textarea><img src=x onerror=alert(2)>"
    run = write_run(tmp_path / "run", 0.6, model_args=evil, task="vqa", response=evil)
    status, out = report(tmp_path, str(run))
    assert status == 0
    with opened(out) as (page, errors):
        assert evil in page.locator("table.runs").inner_text()
        assert errors == []  # no alert dialog, no broken script


def test_script_json_cannot_end_its_script_element() -> None:
    data = {"x": "</script><!-- & -->"}
    text = script_json(data)
    assert "</" not in text and "<!--" not in text and json.loads(text) == data
