"""`live build` end to end on the fixture sites with the scripted model server: every page and item
accounted for, a rerun makes no call and writes the same build, export gives the month's dataset."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from live_llm import KEY_ENV, LiveLLM
from live_sites import SiteServer

from fastmmeval.cli import main
from fastmmeval.live import BuildConfig, CaptureSettings, build, export, load_build, load_month
from fastmmeval.live.records import SUBTASKS
from fastmmeval.live.roles import ROLE_NAMES, RoleSpec

FAST = CaptureSettings(idle_cap_s=2.0, page_timeout_s=15.0)


@pytest.fixture(scope="module")
def sites() -> Iterator[SiteServer]:
    with SiteServer() as server:
        yield server


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "test-key")


def config(out: Path, sites: SiteServer, llm: LiveLLM, **overrides: object) -> BuildConfig:
    roles = tuple(RoleSpec(role, "openai", llm.role_args()) for role in ROLE_NAMES)
    settings = dict(month="2026-12", out=out, sources=tuple(sites.sources), roles=roles, capture=FAST, threshold=6.0,
                    size=300, progress=False)
    return BuildConfig(**(settings | overrides))  # type: ignore[arg-type]


def test_a_month_builds_from_the_fixture_sites_and_a_rerun_asks_nothing(tmp_path: Path, sites: SiteServer) -> None:
    with LiveLLM() as llm:
        first = build(config(tmp_path / "m", sites, llm))
        calls = sum(llm.counts().values())
        again = build(config(tmp_path / "m", sites, llm))
        assert sum(llm.counts().values()) == calls  # every stage result came from the cache
    captured = [c for c in first.captures if c.error is None]
    failed = {c.site.name: c.error for c in first.captures if c.error is not None}
    assert set(failed) == {"missing", "offsite"}
    # 3 extraction calls + 1 generation per page, then check, finalize and score per question (4 per page)
    assert calls == len(captured) * (3 + 1 + 4 * 3)
    assert len(first.items) == 4 * len(captured)
    assert {f.stage for f in first.failures} == {"capture"}
    assert first.manifest["stages"]["score"] == {"in": 4 * len(captured), "out": 4 * len(captured)}
    assert sorted(first.selection.kept + list(first.selection.dropped)) == sorted(i.id for i in first.items)
    assert json.dumps(again.record()["items"]) == json.dumps(first.record()["items"])
    assert load_build(tmp_path / "m").selection.kept == first.selection.kept

    assert main(["live", "review", "--out", str(tmp_path / "m")]) == 0
    assert (tmp_path / "m" / "review.html").read_text().count("<article") == len(first.items)
    task = export(tmp_path / "m")
    assert task.name == "live_bench_2026_12.yaml"
    month = load_month(task.parent)
    assert len(month) == len(first.selection.kept)
    assert set(month["subtask"]) <= set(SUBTASKS)


def test_a_failing_stage_is_recorded_and_the_rest_of_the_month_still_builds(tmp_path: Path, sites: SiteServer) -> None:
    with LiveLLM({"finalize": '{"question": "Which is it? A) one B) two", "answer": "A", "criteria": []}'}) as llm:
        built = build(config(tmp_path / "m", sites, llm, sources=(sites.source("news-en"), sites.source("news-ja"))))
    assert built.items == []
    assert [f.stage for f in built.failures] == ["finalize"] * 8
    assert all(f.raw and "A) one" in f.raw for f in built.failures)
