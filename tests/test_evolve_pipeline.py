"""`evolve run` end to end on an MMBench dev fixture and a local folder of annotated drawn images, every
role played by the scripted server: the spec, patterns and plans land in spec.yaml, the controller's
rounds and every dropped image in the manifest, each kept image becomes an instance whose plan the real
tools run and the vision-blind verifier checks, and the new version is written in MMBench's schema; the
stages one by one write the same version, and a rerun asks nothing again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from evolve_benchmarks import save_mmbench_dev
from evolve_images import write_folder
from evolve_llm import KEY_ENV, EvolveLLM, count_question

from fastmmeval.errors import ConfigError
from fastmmeval.evolve import pipeline
from fastmmeval.evolve.controller import ControllerSettings
from fastmmeval.evolve.executors import open_source
from fastmmeval.evolve.pipeline import EvolveConfig
from fastmmeval.tasks.sources import DATA_DIR_ENV

COUNTS = {"image_scene": 3, "ocr": 3}


@pytest.fixture
def fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    monkeypatch.setenv(KEY_ENV, "test-key")
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    save_mmbench_dev(tmp_path / "data", COUNTS)
    write_folder(tmp_path / "images", 16, topics=sorted(COUNTS))  # each task's query finds its own scenes
    yield tmp_path / "images", tmp_path


def config(llm: EvolveLLM, images: Path, out: Path, **changes: object) -> EvolveConfig:
    roles, generators = llm.role_specs()
    base = EvolveConfig("mmbench_en_dev", out, roles, generators, (open_source("folder", root=images),),
                        controller=ControllerSettings(k=4, tau=0.7, m=3, retrieve=6), images=5, queries=1,
                        workers=8, progress=False)
    return replace(base, **changes)


def test_run_builds_a_verified_version_in_mmbench_s_schema(fixture) -> None:
    images, tmp = fixture
    with EvolveLLM() as llm:
        folder = pipeline.run(config(llm, images, tmp / "update"))
        counts = llm.counts()
    spec = yaml.safe_load((tmp / "update" / "spec.yaml").read_text())
    assert spec["task"] == "mmbench_en_dev" and sorted(spec["atomic"]) == sorted(COUNTS)
    for atomic in spec["atomic"].values():
        assert atomic["patterns"] and atomic["plan"]["queries"] == [f"{atomic['name']} shapes"]
        assert atomic["option_counts"]  # the original's distribution of option counts
    # spec: 1 + one per atomic task; patterns: 5 perspectives + 1 consolidation per task
    assert counts["spec_benchmark"] == 1 and counts["spec_atomic"] == 2
    assert counts["pattern_extract"] == 10 and counts["pattern_consolidate"] == 2
    assert counts["generate"] == 10  # 5 images per task
    # The verifier sees text only: two scenes whose question, options and tool outputs read the same are
    # one call (the second waits for the first and reads its answer from the cache).
    verify_texts = {json.dumps(body, sort_keys=True) for body in llm.bodies("verify")}
    assert counts["verify"] == len(verify_texts) <= 10
    manifest = json.loads((folder / "manifest.json").read_text())
    for name in COUNTS:
        task = manifest["atomic"][name]
        assert task["rounds"][0]["rounds"][0]["rho"] == 1.0  # every drawn scene's text says "shapes"
        assert task["verify"] == {"in": 5, "accepted": 5, "rejected": 0, "failed": 0, "acceptance": 1.0}
    table = pq.read_table(next(folder.glob("*.parquet")))
    assert {"index", "question", "hint", "A", "B", "answer", "category", "L2-category", "image"} <= set(
        table.column_names)
    assert sorted(set(table.column("category").to_pylist())) == sorted(COUNTS)
    assert (folder / "mmbench_en_dev_live_v1.yaml").is_file()


def test_the_verifier_rejects_an_instance_whose_answer_is_wrong(fixture) -> None:
    images, tmp = fixture

    def wrong_answer(text: str) -> str:
        z = count_question(text)
        z["answer"] = "B" if z["answer"] == "A" else "A"
        return json.dumps(z)

    with EvolveLLM({"generate": wrong_answer}) as llm, pytest.raises(ConfigError, match="none of the 0 accepted"):
        pipeline.run(config(llm, images, tmp / "update", atomic=("ocr",), per_task=1))
    verified = json.loads((tmp / "update" / "verified.json").read_text())["ocr"]
    assert verified and all(not v["ok"]["accepted"] for v in verified)
    assert all("the verifier answered" in v["ok"]["reason"] for v in verified)


def test_the_stages_one_by_one_write_the_same_version_and_a_rerun_asks_nothing(fixture) -> None:
    images, tmp = fixture
    with EvolveLLM() as llm:
        whole = pipeline.run(config(llm, images, tmp / "whole"))
        calls = len(llm.server.calls)
        staged = config(llm, images, tmp / "staged")
        for stage in (pipeline.spec, pipeline.patterns, pipeline.plan, pipeline.acquire, pipeline.generate,
                      pipeline.verify):
            stage(staged)
        folder = pipeline.export(staged)
        asked = [json.dumps(body, sort_keys=True) for _, body, _ in llm.server.calls]
        assert set(asked[:calls]) == set(asked[calls:])  # the same calls
        before = len(llm.server.calls)
        pipeline.run(config(llm, images, tmp / "staged"))
        assert len(llm.server.calls) == before  # the rerun: all from the cache
    for name in ("dev.parquet", "mmbench_en_dev_live_v1.yaml"):
        assert (folder / name).read_bytes() == (whole / name).read_bytes()


def test_an_edited_spec_is_what_later_stages_read(fixture) -> None:
    images, tmp = fixture
    with EvolveLLM() as llm:
        first = config(llm, images, tmp / "update", atomic=("ocr",))
        pipeline.spec(first)
        path = tmp / "update" / "spec.yaml"
        spec = yaml.safe_load(path.read_text())
        spec["atomic"]["ocr"]["purpose"] = "Reads the printed word on a sign."
        path.write_text(yaml.safe_dump(spec))
        pipeline.patterns(first)
        assert all("Purpose: Reads the printed word on a sign." in t or "purpose: Reads the printed word" in t
                   for t in llm.texts("pattern_extract"))
