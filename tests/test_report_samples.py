"""The report's samples browser: statuses in the index, and the page in Debian's chromium (filters, pagination,
escaping, thumbnails, a 100k-sample run opening at once)."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import image_tasks
import pytest
from report_runs import write_run

from fastmmeval.report.samples_view import collect, samples_section, statuses

EVIL = "<script>alert(1)</script></textarea></script><!--"


def test_statuses_follow_the_headline_metric_the_rule_and_failures() -> None:
    samples = [{"metrics": {"acc": 1.0}, "extract_rule": "letter", "failed": None},
               {"metrics": {"acc": 0.0}, "extract_rule": "letter", "failed": None},
               {"metrics": {"acc": 0.0}, "extract_rule": "unparsed", "failed": None},
               {"failed": "task t, doc 3: model error: timeout", "failure_kind": "model error"},
               {"metrics": {"acc": None}, "extract_rule": "judge_failed", "failed": None}]
    assert statuses(samples, "acc") == ["correct", "wrong", "unparsed", "failed", "unscored"]
    partial = [{"metrics": {"anls": 0.6}}, {"metrics": {"anls": 0.2}}]
    assert statuses(partial, "anls") == ["correct", "wrong"]
    assert statuses([{"metrics": {"cider": 1.3}}, {"metrics": {"cider": 0.2}}], "cider") == ["scored", "scored"]
    assert statuses([{"metrics": {}}], None) == ["unscored"]


def test_the_index_counts_a_runs_statuses_and_rules(tmp_path: Path) -> None:
    run = write_run(tmp_path / "a", 0.5, n=300)
    index, rows = collect([run], thumbnails=0)
    names = [index["statuses"][s] for s in index["s"]]
    samples = [json.loads(line) for line in (run / "samples" / "vqa.jsonl").read_text().splitlines()]
    assert names.count("failed") == 6 and names.count("correct") == sum(
        s.get("metrics", {}).get("exact_match") == 1.0 for s in samples)
    assert set(index["rules"]) == {"", "raw"}  # a failed doc has no rule
    assert index["d"][:2] == ["d0", "d1"] and len(rows) == 300 and rows[0]["prompt"][0]["role"] == "user"


def _evil_run(root: Path) -> Path:
    run = write_run(root, 1.0, n=6)
    path = run / "samples" / "vqa.jsonl"
    samples = [json.loads(line) for line in path.read_text().splitlines()]
    samples[0].update(response=EVIL, doc_id="d0" + EVIL, prompt=[{"role": "user", "content": EVIL}])
    samples[1]["judgments"] = {"correctness": {"gpt": {"prompt": "p", "raw": "Right. " + EVIL, "value": 1,
                                                       "error": None}}}
    path.write_text("".join(json.dumps(s) + "\n" for s in samples))
    return run


@pytest.fixture
def browser() -> Iterator[Any]:
    if shutil.which("chromium") is None:
        pytest.skip("needs Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=shutil.which("chromium"))
        yield b
        b.close()


def _open(browser: Any, tmp_path: Path, fragment: str) -> tuple[Any, list[str], float]:
    """The fragment in a minimal page opened from disk: the page, its console errors, seconds until interactive."""
    page_file = tmp_path / "report.html"
    page_file.write_text(f"<!doctype html><html><head><meta charset='utf-8'></head><body>{fragment}</body></html>",
                         encoding="utf-8")
    page = browser.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("dialog", lambda d: (errors.append("dialog: " + d.message), d.dismiss()))
    start = time.perf_counter()
    page.goto(page_file.as_uri())
    page.wait_for_selector("#samples .fm-samples[data-ready='1']")
    return page, errors, time.perf_counter() - start


def test_filters_and_pagination_in_the_browser(browser: Any, tmp_path: Path) -> None:
    runs = [write_run(tmp_path / "a", 0.5, n=300, seed=1), write_run(tmp_path / "b", 0.7, n=120, seed=2)]
    index, _ = collect(runs, thumbnails=0)
    wrong = index["s"].count(index["statuses"].index("wrong"))
    page, errors, _ = _open(browser, tmp_path, samples_section(runs, thumbnails=0))
    assert page.text_content("#samples .fm-count") == "420 of 420 samples"
    assert page.locator("#samples .fm-row").count() == 50
    page.click("#samples button[data-status='wrong']")
    assert page.text_content("#samples .fm-count") == f"{wrong} of 420 samples"
    assert page.locator("#samples .fm-row.fm-wrong").count() == min(50, wrong)
    page.select_option("#samples select[data-filter='run']", "1")
    page.click("#samples button[data-status='failed']")
    assert page.text_content("#samples .fm-count") == "2 of 420 samples"
    page.click("#samples button[data-status='all']")
    page.select_option("#samples select[data-filter='run']", "-1")
    page.click("#samples .fm-next")
    page.wait_for_function("document.querySelector('#samples .fm-page').textContent === 'page 2 of 9'")
    assert page.locator("#samples .fm-doc").first.text_content() == "d50"
    page.fill("#samples .fm-search", "d29")
    page.wait_for_function("document.querySelector('#samples .fm-count').textContent.startsWith('12 of')")
    assert errors == []


def test_every_value_renders_as_text(browser: Any, tmp_path: Path) -> None:
    page, errors, _ = _open(browser, tmp_path, samples_section([_evil_run(tmp_path / "evil")], thumbnails=0))
    assert page.locator("#samples .fm-row").count() == 6
    assert page.locator("#samples .fm-response").first.text_content().endswith(EVIL)
    assert page.locator("#samples .fm-doc").first.text_content() == "d0" + EVIL
    assert EVIL in page.locator("#samples .fm-judge").first.text_content()
    page.select_option("#samples select[data-filter='judge']", "1")
    assert page.text_content("#samples .fm-count") == "1 of 6 samples"
    assert errors == []


def test_thumbnails_come_from_the_tasks_docs_and_refs_where_its_data_is_gone(browser: Any, tmp_path: Path) -> None:
    tasks = image_tasks.write_task(tmp_path / "tasks", [{"id": f"q{i}", "image": f"{i}.png", "question": "what?",
                                                         "answer": "ok"} for i in range(3)],
                                   {f"{i}.png": image_tasks.png() for i in range(3)})
    assert image_tasks.run(tasks, tmp_path / "out") == 0
    run = image_tasks.only_run(tmp_path / "out")
    index, rows = collect([run], thumbnails=2)
    assert [len(r.get("thumbs", [])) for r in rows] == [1, 1, 0] and index["notices"] == []
    assert rows[0]["thumbs"][0].startswith("data:image/jpeg;base64,")
    shutil.rmtree(tasks)
    index, rows = collect([run], thumbnails=2)
    assert not any("thumbs" in r for r in rows) and len(index["notices"]) == 1 and "img_qa" in index["notices"][0]
    page, errors, _ = _open(browser, tmp_path, samples_section([run], thumbnails=2))
    assert page.locator("#samples .fm-ref").count() == 3 and page.locator("#samples .fm-notice").count() == 1
    assert errors == []


def _big_run(root: Path, n: int) -> Path:
    """A finished run of `n` docs with ~300-character prompts and short responses, written fast."""
    write_run(root, 0.5, n=6)
    words = ["the", "of", "a", "image", "shows", "what", "colour", "is", "on", "left", "right", "top", "count",
             "many", "which", "object", "near", "far"]
    lines = []
    for i in range(n):
        question = " ".join(words[(i * 7 + k * 3) % len(words)] for k in range(50))[:300]
        hit = 1.0 if i % 3 else 0.0
        # A template, not json.dumps per line: the text holds nothing JSON escapes, and this is 3x faster.
        lines.append(f'{{"doc_id": "d{i}", "doc_index": {i}, "request_kind": "generate", "prompt": [{{"role": "user", '
                     f'"content": "<image>{question} {i}?"}}], "images": ["img/{i}.png"], '
                     f'"response": "answer {i % 97}", "target": ["yes"], "extracted": "{i % 97}", '
                     f'"extract_rule": "raw", "metrics": {{"exact_match": {hit}}}, "failed": null}}')
    (root / "samples" / "vqa.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_a_100k_sample_run_opens_at_once(browser: Any, tmp_path: Path) -> None:
    run = _big_run(tmp_path / "big", 100_000)
    start = time.perf_counter()
    fragment = samples_section([run], thumbnails=0)
    built = time.perf_counter() - start
    page, errors, opened = _open(browser, tmp_path, fragment)
    assert page.text_content("#samples .fm-count") == "100000 of 100000 samples"
    print(f"100k samples: fragment built in {built:.2f} s ({len(fragment) / 1e6:.1f} MB), interactive in "
          f"{opened:.2f} s")
    page.click("#samples button[data-status='wrong']")
    assert page.text_content("#samples .fm-count") == "33334 of 100000 samples"
    assert opened < 2.0 and errors == []
