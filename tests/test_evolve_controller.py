"""The feedback controller (MMBench-Live Algorithm 2) against a scripted judge: it stops as soon as a
query's acceptance rate reaches tau, rewrites the query from the rejected candidates' rationales
otherwise, searches the rewritten query next, keeps the last query after M rounds, and keeps only the
candidates the judge accepts from the final retrieval; every call goes through the stage cache."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from evolve_images import drawn_scene
from evolve_llm import KEY_ENV, EvolveLLM

from fastmmeval.evolve.controller import ControllerSettings, aggregate, control
from fastmmeval.evolve.executors import open_source
from fastmmeval.evolve.records import Judgment
from fastmmeval.evolve.spec import AtomicSpec, Pattern
from fastmmeval.live.roles import Role, RoleSpec, build_roles
from fastmmeval.live.store import Blobs, StageCache

ATOMIC = AtomicSpec("object_counting", "finegrained_perception (cross-instance)", "Counts objects of one colour.",
                    "Drawings of flat shapes.", 10, {4: 10}, [],
                    [Pattern("visual content", "several flat coloured shapes", "central")])


def folder(root: Path, groups: dict[str, tuple[int, int]]) -> Path:
    """A folder source whose images carry a group word in their title: groups[word] = (images, of which
    'good' in their context, which the scripted judge accepts)."""
    root.mkdir(parents=True)
    lines, i = [], 0
    for word, (n, good) in groups.items():
        for j in range(n):
            name = f"{word}_{j}.png"
            drawn_scene(i).image.save(root / name)
            quality = "good shapes" if j < good else "blurry"
            lines.append({"file": name, "title": f"{word} picture {j}", "context": f"{quality} number {j}"})
            i += 1
    (root / "manifest.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return root


def judge_by_quality(text: str) -> str:
    accept = "good shapes" in text
    return json.dumps({"accept": accept, "rationales": ["shapes are clear" if accept else "the picture is blurry"]})


def next_word(words: list[str]) -> callable:
    """An update role that answers the words in turn."""
    queue = iter(words)
    return lambda text: json.dumps({"query": next(queue)})


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Blobs, StageCache]]:
    monkeypatch.setenv(KEY_ENV, "test-key")
    cache = StageCache(tmp_path / "cache.sqlite")
    yield Blobs(tmp_path / "blobs"), cache
    cache.close()


def roles(llm: EvolveLLM) -> tuple[Role, Role]:
    built = build_roles([RoleSpec("judge", "openai", llm.role_args()), RoleSpec("writer", "openai", llm.role_args())])
    return built["judge"], built["writer"]


def test_a_query_that_reaches_tau_stops_the_loop_and_is_the_one_retrieved(tmp_path, workspace) -> None:
    blobs, cache = workspace
    source = open_source("folder", root=folder(tmp_path / "images", {"alpha": (10, 4), "beta": (12, 8)}))
    settings = ControllerSettings(k=10, tau=0.7, m=3, retrieve=12)
    with EvolveLLM({"judge": judge_by_quality, "update_query": next_word(["beta"])}) as llm, \
            ThreadPoolExecutor(4) as pool:
        judge, writer = roles(llm)
        done = control("alpha", ATOMIC, source, judge, writer, blobs, cache, pool, settings)
        assert [(r.query, r.rho) for r in done.rounds] == [("alpha", 0.4), ("beta", 0.8)]
        assert done.rounds[0].next_query == "beta" and done.rounds[0].feedback == ["the picture is blurry"]
        assert done.rounds[1].next_query == ""  # no update once tau is reached
        assert done.query == "beta"
        assert llm.counts()["update_query"] == 1
        (update,) = llm.texts("update_query")
        assert 'The query "alpha"' in update and "(4 of 10 accepted)" in update and "- the picture is blurry" in update
        # q* retrieves `retrieve` candidates, and only those the judge accepts are kept
        assert len(done.judged) == 12
        kept = [c.title for c, j in done.judged if isinstance(j, Judgment) and j.accept]
        assert kept == [f"beta picture {j}" for j in range(8)]
        # the round's top 10 beta images were judged already: only the 2 new ones are asked about
        assert llm.counts()["judge"] == 10 + 10 + 2


def test_a_query_that_never_reaches_tau_stops_after_m_rounds_with_the_last_query(tmp_path, workspace) -> None:
    blobs, cache = workspace
    source = open_source("folder", root=folder(tmp_path / "images",
                                               {"alpha": (10, 3), "beta": (10, 3), "gamma": (10, 3)}))
    settings = ControllerSettings(k=10, tau=0.7, m=3, retrieve=10)
    with EvolveLLM({"judge": judge_by_quality, "update_query": next_word(["beta", "gamma", "delta"])}) as llm, \
            ThreadPoolExecutor(4) as pool:
        judge, writer = roles(llm)
        done = control("alpha", ATOMIC, source, judge, writer, blobs, cache, pool, settings)
        assert [(r.query, r.rho) for r in done.rounds] == [("alpha", 0.3), ("beta", 0.3), ("gamma", 0.3)]
        assert done.query == "gamma"  # the last query searched; no update after round M
        assert llm.counts()["update_query"] == 2
        assert [c.title for c, j in done.judged if j.accept] == [f"gamma picture {j}" for j in range(3)]


def test_a_rerun_asks_nothing_again(tmp_path, workspace) -> None:
    blobs, cache = workspace
    source = open_source("folder", root=folder(tmp_path / "images", {"alpha": (10, 4), "beta": (10, 9)}))
    settings = ControllerSettings(k=10, tau=0.7, m=3, retrieve=10)
    with EvolveLLM({"judge": judge_by_quality, "update_query": lambda t: json.dumps({"query": "beta"})}) as llm, \
            ThreadPoolExecutor(4) as pool:
        judge, writer = roles(llm)
        first = control("alpha", ATOMIC, source, judge, writer, blobs, cache, pool, settings)
        calls = len(llm.server.calls)
        again = control("alpha", ATOMIC, source, judge, writer, blobs, cache, pool, settings)
        assert len(llm.server.calls) == calls
        assert [r.record() for r in again.rounds] == [r.record() for r in first.rounds]


def test_a_failed_judgment_accepts_nothing_and_is_recorded(tmp_path, workspace) -> None:
    from aiohttp import web

    blobs, cache = workspace
    source = open_source("folder", root=folder(tmp_path / "images", {"alpha": (10, 10)}))

    def flaky(text: str) -> str | web.Response:
        if re.search(r"number [0-2]\b", text):
            return web.json_response({"error": {"message": "overloaded"}}, status=500)
        return judge_by_quality(text)

    with EvolveLLM({"judge": flaky}) as llm, ThreadPoolExecutor(4) as pool:
        judge, writer = roles(llm)
        done = control("alpha", ATOMIC, source, judge, writer, blobs, cache, pool,
                       ControllerSettings(k=10, tau=0.7, m=3, retrieve=10))
    assert [r.rho for r in done.rounds] == [0.7]
    # failures are never cached: the final retrieval asks about those 3 again (and they fail again)
    assert len(done.failures) == 6 and all(f.stage == "judge" for f in done.failures)
    assert [c.title for c, j in done.judged if isinstance(j, Judgment) and j.accept] == [
        f"alpha picture {j}" for j in range(3, 10)]


def test_the_rewritten_query_is_what_the_next_search_receives(workspace, monkeypatch) -> None:
    from evolve_servers import NOW, SerperStandIn

    blobs, cache = workspace
    monkeypatch.setenv("SERPER_API_KEY", "fixture-key")
    reject = json.dumps({"accept": False, "rationales": ["no circles are visible"]})
    with SerperStandIn(key="fixture-key") as serper, \
            EvolveLLM({"judge": reject, "update_query": next_word(["red circles", "blue squares"])}) as llm, \
            ThreadPoolExecutor(4) as pool:
        source = open_source("serper", base_url=serper.base_url, now=NOW)
        judge, writer = roles(llm)
        done = control("street signs", ATOMIC, source, judge, writer, blobs, cache, pool,
                       ControllerSettings(k=3, tau=0.7, m=3, retrieve=5))
        assert [q["q"] for q in serper.queries] == ["street signs", "red circles", "blue squares", "blue squares"]
        assert [q["num"] for q in serper.queries] == [3, 3, 3, 5]
        assert all(q["tbs"] == "qdr:y" for q in serper.queries)  # the past year
    assert done.query == "blue squares" and [r.rho for r in done.rounds] == [0.0, 0.0, 0.0]
    assert all(isinstance(j, Judgment) and not j.accept for _, j in done.judged)


def test_a_source_that_cannot_be_searched_is_a_recorded_failure(workspace, monkeypatch) -> None:
    from evolve_servers import NOW, SerperStandIn

    blobs, cache = workspace
    monkeypatch.setenv("SERPER_API_KEY", "a-wrong-key")
    with SerperStandIn(key="fixture-key") as serper, EvolveLLM() as llm, ThreadPoolExecutor(4) as pool:
        source = open_source("serper", base_url=serper.base_url, now=NOW)
        judge, writer = roles(llm)
        done = control("street signs", ATOMIC, source, judge, writer, blobs, cache, pool,
                       ControllerSettings(k=3, tau=0.7, m=1, retrieve=5))
    assert done.judged == [] and {f.stage for f in done.failures} == {"retrieve"}
    assert "a-wrong-key" not in json.dumps([f.record() for f in done.failures])


def test_feedback_is_each_rejected_rationale_once() -> None:
    judgments = [Judgment("a", False, ["blurry", "too dark"]), Judgment("b", True, ["clear"]),
                 Judgment("c", False, ["blurry"])]
    assert aggregate(judgments) == ["blurry", "too dark"]
