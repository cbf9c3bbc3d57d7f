"""Generation and verification on the annotated drawn scenes, with the real tools: an instance whose
answer is the truth is kept, one whose answer is wrong is rejected; a generator's plan naming an
unknown tool or giving a bad argument is refused with its reason, and the verifier never sees the image."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from evolve_images import drawn_scene
from evolve_llm import KEY_ENV, EvolveLLM, count_question

from fastmmeval.evolve.generate import generate_item
from fastmmeval.evolve.records import Candidate, Failure, Generated, Verified
from fastmmeval.evolve.spec import AtomicSpec
from fastmmeval.evolve.toolbox import default_tools
from fastmmeval.evolve.verify import verify_item
from fastmmeval.live.roles import RoleSpec, build_roles
from fastmmeval.live.store import Blobs, StageCache

ATOMIC = AtomicSpec("object_counting", "finegrained_perception (cross-instance)", "Counts objects of one colour.",
                    "Drawings of flat shapes.", 10, {4: 10}, [])
SCENES = range(6)


@pytest.fixture(scope="module")
def tools():
    return default_tools()


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Blobs, StageCache, list[Candidate]]]:
    monkeypatch.setenv(KEY_ENV, "test-key")
    blobs, cache = Blobs(tmp_path / "blobs"), StageCache(tmp_path / "cache.sqlite")
    candidates = []
    for i in SCENES:
        scene = drawn_scene(i)
        data = io.BytesIO()
        scene.image.save(data, format="PNG")
        colours = ", ".join(f"{n} {c}" for c, n in sorted(scene.counts.items()))
        candidates.append(Candidate(blobs.put(data.getvalue(), ".png"), ".png", "folder", 320, 240, "0" * 16,
                                    title=f"scene {i}", context=f"A sign reading {scene.word} above {colours} shapes."))
    yield blobs, cache, candidates
    cache.close()


def generate(llm: EvolveLLM, candidate: Candidate, blobs: Blobs, cache: StageCache, tools) -> Generated | Failure:
    roles = build_roles([RoleSpec("generator1", "openai", llm.role_args()),
                         RoleSpec("comparer", "openai", llm.role_args())])
    with ThreadPoolExecutor(2) as pool:
        return generate_item("mmbench_en_dev", ATOMIC, candidate, [roles["generator1"]], roles["comparer"], tools,
                             blobs, cache, pool, index=0)


def test_true_instances_are_kept_and_wrong_answers_rejected(setup, tools) -> None:
    blobs, cache, candidates = setup

    def wrong_for_odd_scenes(text: str) -> str:
        z = count_question(text)
        if "scene 1\n" in text or "scene 3\n" in text or "scene 5\n" in text:
            z["answer"] = "B" if z["answer"] == "A" else "A"
        return json.dumps(z)

    with EvolveLLM({"generate": wrong_for_odd_scenes}) as llm:
        verifier = build_roles([RoleSpec("verifier", "openai", llm.role_args())])["verifier"]
        results = []
        for c in candidates:
            generated = generate(llm, c, blobs, cache, tools)
            assert isinstance(generated, Generated)
            results.append(verify_item(generated, c.suffix, verifier, tools, blobs, cache))
        assert all("image_url" not in json.dumps(b) for b in llm.bodies("verify"))  # vision-blind
        assert llm.bodies("generate")[0]["messages"][-1]["content"][0]["type"] == "image_url"  # generators see it
    assert [isinstance(v, Verified) and v.accepted for v in results] == [True, False, True, False, True, False]
    for i, v in zip(SCENES, results, strict=True):
        colour = sorted(drawn_scene(i).counts)[0]
        assert v.observations[0].startswith(f"{drawn_scene(i).counts[colour]} {colour} object")
        if not v.accepted:
            assert v.reason.startswith("the verifier answered")


@pytest.mark.parametrize(("step", "reason"), [
    ({"tool": "zoom", "inputs": [], "purpose": "look closer"}, "plan/0/tool"),
    ({"tool": "count", "inputs": [{"name": "colour", "value": "turquoise-ish"}], "purpose": "count"},
     "step 1: colour"),
    ({"tool": "region_colour", "inputs": [{"name": "region", "value": "upper-middle-ish"}], "purpose": "colour"},
     "step 1: region"),
    ({"tool": "count", "inputs": [{"name": "colour", "value": "@2"}], "purpose": "count"}, "names a later step"),
])  # fmt: skip
def test_a_plan_the_tools_cannot_run_is_refused_with_its_reason(setup, tools, step, reason) -> None:
    blobs, cache, candidates = setup

    def with_step(text: str) -> str:
        return json.dumps({**count_question(text), "plan": [step]})

    with EvolveLLM({"generate": with_step}) as llm:
        got = generate(llm, candidates[0], blobs, cache, tools)
    assert isinstance(got, Failure) and got.stage == "generate" and got.raw is not None
    assert reason in got.reason, got.reason


def test_a_plan_failing_at_run_time_rejects_the_instance_without_asking_the_verifier(setup, tools) -> None:
    blobs, cache, candidates = setup
    plan = [{"tool": "count", "inputs": {"colour": "red"}, "purpose": "count"},
            {"tool": "region_colour", "inputs": {"region": "@1"}, "purpose": "the colour of the first box"}]
    generated = Generated("object_counting", candidates[0].sha, "How many?", ["1", "2"], "A", plan, "gen")
    with EvolveLLM() as llm:
        verifier = build_roles([RoleSpec("verifier", "openai", llm.role_args())])["verifier"]
        v = verify_item(generated, ".png", verifier, tools, blobs, cache)
        assert llm.counts()["verify"] == 0
    assert isinstance(v, Verified) and not v.accepted and v.reason.startswith("plan: step 2")
