"""Stage 8: `export_version` writes `<task>_live_v<N>` in the original benchmark's schema (MMBench dev's
hub features plus provenance, with CircularEval's rotations as the dev split holds them), balanced per
atomic task like the original, the same bytes for the same inputs, and a task file with which
`fastmmeval run` scores it by the original's protocol: gpt_eval_score is CircularEval, as computed by
hand and by lmms-eval 0.7.3's own MMBench evaluator."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import datasets
import pytest
from evolve_benchmarks import MMBENCH_FEATURES, accepted_items, save_mmbench_dev
from peer_lmms_eval import lmms_eval_module
from task_fixtures import run_task, save_split, task_config

from fastmmeval.errors import ConfigError
from fastmmeval.evolve.benchmark import Layout, load_benchmark
from fastmmeval.evolve.dataset import PROVENANCE, export_version, version_task_name
from fastmmeval.evolve.records import Verified
from fastmmeval.live.store import Blobs
from fastmmeval.tasks.sources import DATA_DIR_ENV

ORIGINAL = {"ocr": 4, "image_scene": 2, "spatial_relationship": 2}  # distinct questions per atomic task
MANIFEST = {"stages": {"generate": {"in": 13, "out": 13, "failed": 0}}, "prompts": {"generate@1": "ab" * 32}}
TASK = "mmbench_en_dev_live_v1"


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


@pytest.fixture
def bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    save_mmbench_dev(tmp_path / "data", ORIGINAL)
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    return load_benchmark("mmbench_en_dev")


def rows_of(folder: Path) -> list[dict[str, Any]]:
    """The version's rows, images decoded."""
    return list(datasets.load_from_disk(str(folder / "hf")))


def export_of(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "manifest.json").read_text())["export"]


def test_the_version_has_the_originals_schema_rotations_and_provenance(bench: Any, tmp_path: Path) -> None:
    blobs = Blobs(tmp_path / "blobs")
    accepted = accepted_items(blobs, {"ocr": 4, "image_scene": 2, "spatial_relationship": 2})
    out = export_version(bench, accepted, blobs, tmp_path / "v1", 1, manifest=MANIFEST)
    assert version_task_name("mmbench_en_dev", 1) == TASK
    assert sorted(p.name for p in out.iterdir()) == ["dev.parquet", "hf", "manifest.json", f"{TASK}.yaml"]
    hub = datasets.load_dataset("parquet", data_files={"dev": str(out / "dev.parquet")}, split="dev")
    assert hub.features == datasets.load_from_disk(str(out / "hf")).features
    assert dict(hub.features) == {**MMBENCH_FEATURES, **{c: datasets.Value("string") for c in PROVENANCE}}
    rows = rows_of(out)
    assert [r["index"] for r in rows] == sorted(r["index"] for r in rows)
    by_question: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_question.setdefault(row["index"] % 1_000_000, []).append(row)
    assert sorted(by_question) == list(range(8))  # question i at index i
    by_sha = {c.sha: (v, c) for v, c in accepted}
    for i, rotations in by_question.items():
        verified, candidate = by_sha[rotations[0]["image_sha256"]]
        g = verified.generated
        options, answer = g["options"], g["options"]["ABCD".index(g["answer"])]
        assert [r["index"] for r in rotations] == [i + k * 1_000_000 for k in range(len(options))]
        for k, row in enumerate(rotations):
            texts = [row[c] for c in "ABCD"]
            assert texts == options[k:] + options[:k] + [None] * (4 - len(options))  # turned k places
            assert row[row["answer"]] == answer  # the answer letter moved with its option
            assert (row["question"], row["hint"], row["category"]) == (g["question"], g["hint"] or None, g["atomic"])
            assert row["L2-category"] == bench.ability(g["atomic"]) and row["split"] == "dev"
            assert row["image"].size == (candidate.width, candidate.height)
            assert (row["source"], row["image_source"], row["image_url"]) == ("folder", "folder", candidate.url)
            assert (row["generator"], row["verifier"], row["verifier_answer"]) == ("gen-a", "blind-v", g["answer"])
            assert json.loads(row["plan"]) == g["plan"]
            assert json.loads(row["observations"]) == verified.observations
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stages"] == MANIFEST["stages"] and manifest["prompts"] == MANIFEST["prompts"]
    assert manifest["export"]["rows"] == len(rows) and manifest["export"]["questions"] == 8


def test_the_version_runs_with_circular_eval(bench: Any, tmp_path: Path) -> None:
    blobs = Blobs(tmp_path / "blobs")
    accepted = accepted_items(blobs, {"ocr": 4, "image_scene": 2, "spatial_relationship": 2})
    out = export_version(bench, accepted, blobs, tmp_path / "v1", 1, manifest=MANIFEST)
    rows = rows_of(out)
    rng = random.Random(3)
    wrong = {r["index"] for r in rows if rng.random() < 0.2} | {1_000_003}  # some rotations answered wrong
    answers = {str(r["index"]): ("BA"[r["answer"] == "B"] if r["index"] in wrong else r["answer"]) for r in rows}
    judge = tmp_path / "judges.json"
    judge.write_text(json.dumps({"judges": [{"name": "judge", "model": "scripted_judge", "args": {}}]}))
    results, samples = run_task(
        tmp_path, tmp_path / "data", TASK, answers, list(answers), "--include_path", str(out), "--judge_config",
        str(judge),
    )  # fmt: skip
    assert len(samples) == len(rows) and not any(s.get("failed") for s in samples)
    right: dict[int, bool] = {}
    for r in rows:
        question = r["index"] % 1_000_000
        right[question] = right.get(question, True) and r["index"] not in wrong
    by_hand = 100 * sum(right.values()) / len(right)
    assert 0 < by_hand < 100
    assert results["gpt_eval_score,none"] == pytest.approx(by_hand)
    utils = lmms_eval_module("tasks.mmbench.en_utils")
    lmms_eval_module("tasks._task_utils.mcq_extract")
    items = [utils.mmbench_process_results(dict(r), [answers[str(r["index"])]])["gpt_eval_score"] for r in rows]
    assert all(utils.mmbench_evaluator.prefetch_answer(dict(item)) for item in items)  # no GPT needed
    assert utils.mmbench_evaluator.eval_result(items, eval_method="static")[0] * 100 == pytest.approx(by_hand)


def test_balanced_like_the_original(bench: Any, tmp_path: Path) -> None:
    blobs = Blobs(tmp_path / "blobs")
    accepted = accepted_items(blobs, {"ocr": 9, "image_scene": 3, "spatial_relationship": 5})
    # The original has 4 : 2 : 2; image_scene allows 3 / 2 of its share, so every task gets 1.5 times its own.
    export = export_of(export_version(bench, accepted, blobs, tmp_path / "a", 1, manifest=MANIFEST))
    assert {t: s["exported"] for t, s in export["by_task"].items()} == {
        "ocr": 6, "image_scene": 3, "spatial_relationship": 3}  # fmt: skip
    assert export["policy"] == "proportional" and export["short"] == []
    left = [d for d in export["not_exported"] if d["reason"].startswith("balance")]
    assert len(left) == 17 - 12 and {d["atomic"] for d in left} == {"ocr", "spatial_relationship"}
    # Another seed picks others; the same seed the same.
    again = export_of(export_version(bench, accepted, blobs, tmp_path / "b", 1, manifest=MANIFEST, seed=0))
    other = export_of(export_version(bench, accepted, blobs, tmp_path / "c", 1, manifest=MANIFEST, seed=1))
    assert again["not_exported"] == export["not_exported"] != other["not_exported"]

    out = export_version(bench, accepted, blobs, tmp_path / "d", 2, manifest=MANIFEST, per_task=4)
    export = export_of(out)
    assert {t: (s["wanted"], s["exported"]) for t, s in export["by_task"].items()} == {
        "ocr": (4, 4), "image_scene": (4, 3), "spatial_relationship": (4, 4)}  # fmt: skip
    assert export["short"] == ["image_scene"] and export["task"] == "mmbench_en_dev_live_v2"
    assert (out / "mmbench_en_dev_live_v2.yaml").is_file()


def test_items_that_cannot_be_exported_are_listed_with_their_reason(bench: Any, tmp_path: Path) -> None:
    blobs = Blobs(tmp_path / "blobs")
    accepted = accepted_items(blobs, {"ocr": 3, "image_scene": 1})
    verified, candidate = accepted[0]
    twice = (Verified.from_record({**verified.record(), "observations": ["again"]}), candidate)
    unknown = accepted_items(blobs, {"ocr": 1}, start=20)[0]
    unknown[0].generated["atomic"] = "celebrity_recognition"
    five = accepted_items(blobs, {"ocr": 1}, start=21)[0]
    five[0].generated["options"] = ["1", "2", "3", "4", "5"]
    five[0].generated["atomic"] = "ocr"
    export = export_of(export_version(bench, [*accepted, twice, unknown, five], blobs, tmp_path / "v1", 1,
                                      manifest=MANIFEST))  # fmt: skip
    reasons = {d["item"]: d["reason"] for d in export["not_exported"]}
    assert reasons[unknown[1].sha] == "atomic task 'celebrity_recognition' is not one of mmbench_en_dev's"
    assert reasons[five[1].sha] == "5 options: mmbench_en_dev holds 2 to 4 non-empty options"
    assert reasons[candidate.sha] == "its image is already another exported item's"
    assert export["tasks_without_items"] == ["spatial_relationship"]
    assert export["accepted"] == 7 and export["questions"] == 3  # ocr 2 : image_scene 1, the original's 4 : 2


def test_same_inputs_give_the_same_bytes(bench: Any, tmp_path: Path) -> None:
    blobs = Blobs(tmp_path / "blobs")
    accepted = accepted_items(blobs, {"ocr": 5, "image_scene": 2, "spatial_relationship": 3})
    first = export_version(bench, accepted, blobs, tmp_path / "a", 1, manifest=MANIFEST)
    shuffled = random.Random(1).sample(accepted, len(accepted))
    second = export_version(bench, shuffled, blobs, tmp_path / "b", 1, manifest=MANIFEST)
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file())
    for name in files:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    again = export_version(bench, accepted, blobs, first, 1, manifest=MANIFEST)  # replaces the earlier export
    assert (again / "dev.parquet").read_bytes() == (second / "dev.parquet").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "blobs", "data"]


def test_another_benchmark_with_its_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SEED-Bench (no rotations, four `choice_*` options, images as a list, only its image rows run) read
    by its layout: the version keeps its schema and `where`, and scores with plain accuracy."""
    s = datasets.Value("string")
    features = datasets.Features({
        "answer": s, **{f"choice_{c}": s for c in "abcd"}, "data_id": s, "data_type": s, "question": s,
        "question_id": s, "question_type_id": datasets.Value("int16"), "image": datasets.Sequence(datasets.Image()),
    })  # fmt: skip
    original = [{"answer": "A", **{f"choice_{c}": f"{c} {q}" for c in "abcd"}, "data_id": f"{q}.jpg",
                 "data_type": "video" if q == 9 else "image", "question": f"Q{q}?", "question_id": str(100 + q),
                 "question_type_id": 1 + q % 2, "image": []} for q in range(10)]  # fmt: skip
    save_split(tmp_path / "data", task_config("seedbench"), original, features)
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    layout = Layout(atomic="question_type_id", ability=None, hint=None, index="question_id", source=None,
                    options=("choice_a", "choice_b", "choice_c", "choice_d"))  # fmt: skip
    bench = load_benchmark("seedbench", layout=layout)
    assert bench.counts() == {"1": 5, "2": 4}  # the video row is not one of its questions
    blobs = Blobs(tmp_path / "blobs")
    accepted = accepted_items(blobs, {"1": 4, "2": 4}, start=1)  # scenes 1, 4, 7, ... have four options
    four = [(v, c) for v, c in accepted if len(v.generated["options"]) == 4]
    out = export_version(bench, four, blobs, tmp_path / "v1", 1, manifest=MANIFEST)
    rows = rows_of(out)
    assert {r["data_type"] for r in rows} == {"image"} and all(len(r["image"]) == 1 for r in rows)
    assert sorted(r["question_id"] for r in rows) == [str(i) for i in range(len(rows))]
    answers = {r["question_id"]: (r["answer"] if i % 2 else "D") for i, r in enumerate(rows)}
    results, _ = run_task(tmp_path, tmp_path / "data", "seedbench_live_v1", answers, list(answers),
                          "--include_path", str(out))  # fmt: skip
    expected = sum(answers[r["question_id"]] == r["answer"] for r in rows) / len(rows)
    assert results["seed_image,none"] == pytest.approx(expected)


def test_bad_exports_are_one_line_errors(bench: Any, tmp_path: Path) -> None:
    blobs = Blobs(tmp_path / "blobs")
    accepted = accepted_items(blobs, {"ocr": 2})
    verified, candidate = accepted[0]
    rejected = Verified.from_record({**verified.record(), "accepted": False, "reason": "verifier said B"})
    with pytest.raises(ConfigError, match="its verification rejected it"):
        export_version(bench, [(rejected, candidate)], blobs, tmp_path / "v1", 1, manifest=MANIFEST)
    with pytest.raises(ConfigError, match="is paired with candidate"):
        export_version(bench, [(verified, accepted[1][1])], blobs, tmp_path / "v1", 1, manifest=MANIFEST)
    with pytest.raises(ConfigError, match="a version is a whole number from 1"):
        export_version(bench, accepted, blobs, tmp_path / "v1", 0, manifest=MANIFEST)
    with pytest.raises(ConfigError, match="per_task is a whole number from 1"):
        export_version(bench, accepted, blobs, tmp_path / "v1", 1, manifest=MANIFEST, per_task=0)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="holds something other than an evolve version's export"):
        export_version(bench, accepted, blobs, tmp_path / "busy", 1, manifest=MANIFEST)
