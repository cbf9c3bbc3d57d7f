"""LiveBench step 5: `export_month` writes a month in lmms-eval's LiveBench schema (plus provenance) as
parquet and a save_to_disk copy, the same bytes for the same inputs, honouring a review's decisions;
`load_month` reads both forms and lmms-lab's published layout alike, and lmms-eval's own LiveBench task
code reads our rows."""

from __future__ import annotations

import json
import random
from pathlib import Path

import datasets
import pytest
from live_items import month_items
from peer_lmms_eval import lmms_eval_module

from fastmmeval.errors import ConfigError
from fastmmeval.live.dataset import export_month, livebench_features, load_month
from fastmmeval.live.records import SUBTASKS, Item
from fastmmeval.live.review import read_decisions
from fastmmeval.live.select import Selection, select_items
from fastmmeval.live.store import Blobs

MONTH = "2025-01"
MANIFEST = {"month": MONTH, "prompts": {"generate@1": "ab" * 32, "score@1": "cd" * 32}}
# lmms-eval's LiveBench features, as tools/live_bench/live_bench/data_generator/live_bench_data.py declares them.
LMMS_EVAL_FEATURES = datasets.Features({
    "id": datasets.Value("int32"), "images": datasets.Sequence(datasets.Image()), "website": datasets.Value("string"),
    "question": datasets.Value("string"), "answer": datasets.Value("string"), "criteria": datasets.Value("string"),
    "subtask": datasets.Value("string"), "data_generator": datasets.Value("string"),
    "checker": datasets.Value("string"), "date_time": datasets.Value("string"),
    "screen_shoter": datasets.Value("string"), "screen_size": datasets.Value("string"),
    "score": datasets.Value("int32"), "reason": datasets.Value("string"), "scorer_name": datasets.Value("string"),
})  # fmt: skip


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


@pytest.fixture
def month(tmp_path: Path) -> tuple[Blobs, list[Item], Selection]:
    """The sample month's items (one below the threshold) and their selection."""
    blobs = Blobs(tmp_path / "blobs")
    items = month_items(blobs)
    return blobs, items, select_items(items, threshold=6, size=100, seed=0)


def _undecoded(data: datasets.Dataset) -> list[dict]:
    """The rows with each image as its stored bytes."""
    return data.cast_column("images", datasets.Sequence(datasets.Image(decode=False))).to_list()


def test_round_trip_through_parquet_and_save_to_disk(month: tuple, tmp_path: Path) -> None:
    blobs, items, selection = month
    out = export_month(items, blobs, MONTH, tmp_path / MONTH, MANIFEST, selection=selection)
    assert sorted(p.name for p in out.iterdir()) == ["hf", "manifest.json", "test.parquet"]
    forms = [load_month(out / "test.parquet"), load_month(out), load_month(out / "hf")]
    for data in forms:
        assert list(data.features)[: len(LMMS_EVAL_FEATURES)] == list(LMMS_EVAL_FEATURES)
        assert {k: data.features[k] for k in LMMS_EVAL_FEATURES} == LMMS_EVAL_FEATURES
        assert _undecoded(data) == _undecoded(forms[0])
    data = forms[0]
    assert len(data) == 8 and data["id"] == list(range(8))
    assert data["subtask"] == sorted(data["subtask"], key=SUBTASKS.index)
    by_id = {i.id: i for i in items}
    for row in _undecoded(data):
        source = by_id[row["item_id"]]
        shas = source.capture["screens"]
        assert row["screen_sha256"] == shas
        assert [im["bytes"] for im in row["images"]] == [blobs.get(s, ".png") for s in shas]  # the PNGs as captured
        assert row["question"] == source.draft["question"] and row["date_time"] == "2025-01-15 08:30:00"
        assert (row["http_status"], row["screen_size"], row["checker"]) == (200, "1024x1024", "check-model")
        assert row["prompts"] == ["generate@1", "score@1"]
    # lmms-eval's score is an int32: the exact total is kept beside it, rounded half up.
    assert {(r["score_total"], r["score"]) for r in data} == {(10.0, 10), (9.5, 10), (9.0, 9)}
    japanese = next(r for r in data if r["source_language"] == "ja")
    assert json.loads(japanese["website"]) == {"url": "http://127.0.0.1:8124/", "name": "掲示板", "subject": "forum"}
    assert japanese["screen_shoter"] == "rolling_screen" and len(japanese["images"]) == 2
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["prompts"] == MANIFEST["prompts"]
    assert {k: manifest["export"][k] for k in ("month", "items", "selected", "accepted", "rejected", "rows")} == {
        "month": MONTH, "items": 9, "selected": 8, "accepted": [], "rejected": [], "rows": 8,
    }  # fmt: skip
    assert sum(manifest["export"]["by_subtask"].values()) == 8


def test_lmms_eval_task_code_reads_our_rows(month: tuple, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blobs, items, selection = month
    monkeypatch.setenv("OPENAI_API_KEY", "unused")  # utils_v2 builds an OpenAI client when imported
    monkeypatch.delenv("AZURE_OPENAI_ENDPOINT", raising=False)
    utils = lmms_eval_module("tasks.live_bench.utils_v2")
    data = load_month(export_month(items, blobs, MONTH, tmp_path / MONTH, MANIFEST, selection=selection))
    for row in data:
        visuals = utils.livebench_doc_to_visual(row)
        assert [v.mode for v in visuals] == ["RGB"] * len(row["screen_sha256"])
        assert visuals[0].size == (1024, 1024)
        assert utils.livebench_doc_to_text(row, {"pre_prompt": "", "post_prompt": ""}) == row["question"]
        assert row["subtask"] in utils.SUBTASKS


def test_published_month_layout_loads_like_ours(month: tuple, tmp_path: Path) -> None:
    blobs, items, selection = month
    ours = load_month(export_month(items, blobs, MONTH, tmp_path / MONTH, MANIFEST, selection=selection))
    hub = tmp_path / "LiveBench" / "2024-09"
    hub.mkdir(parents=True)
    rows = ours.remove_columns([c for c in ours.column_names if c not in LMMS_EVAL_FEATURES]).to_list()
    datasets.Dataset.from_list(rows, features=LMMS_EVAL_FEATURES).to_parquet(str(hub / "test-00000-of-00001.parquet"))
    theirs = load_month(hub)
    assert theirs.features == livebench_features() == LMMS_EVAL_FEATURES
    assert theirs["question"] == ours["question"]


def test_same_inputs_give_the_same_bytes(month: tuple, tmp_path: Path) -> None:
    blobs, items, selection = month
    first = export_month(items, blobs, MONTH, tmp_path / "a", MANIFEST, selection=selection)
    shuffled = random.Random(1).sample(items, len(items))
    second = export_month(shuffled, blobs, MONTH, tmp_path / "b", MANIFEST, selection=selection)
    for name in ("test.parquet", "manifest.json", "hf/data-00000-of-00001.arrow", "hf/dataset_info.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    # Exporting again replaces the earlier export whole, leaving no temporary folder behind.
    again = export_month(items, blobs, MONTH, first, MANIFEST, selection=selection)
    assert (again / "test.parquet").read_bytes() == (second / "test.parquet").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "blobs"]


def test_decisions_accept_and_reject(month: tuple, tmp_path: Path) -> None:
    blobs, items, selection = month
    low = next(i for i in items if i.id not in selection.kept)
    removed, kept = selection.kept[0], selection.kept[1]
    decisions = {low.id: "accept", removed: "reject", kept: "accept"}
    out = export_month(items, blobs, MONTH, tmp_path / MONTH, MANIFEST, decisions, selection=selection)
    data = load_month(out)
    assert set(data["item_id"]) == set(selection.kept) - {removed} | {low.id}
    assert next(r for r in data if r["item_id"] == low.id)["reason"] == "Not about the page."
    export = json.loads((out / "manifest.json").read_text())["export"]
    assert (export["accepted"], export["rejected"], export["rows"]) == ([low.id], [removed], 8)

    with pytest.raises(ConfigError, match="decisions: 'nope' is not an item of this month"):
        export_month(items, blobs, MONTH, tmp_path / "x", MANIFEST, {"nope": "accept"}, selection=selection)
    with pytest.raises(ConfigError, match=f"decisions: item {low.id}: expected accept or reject, got 'maybe'"):
        export_month(items, blobs, MONTH, tmp_path / "x", MANIFEST, {low.id: "maybe"}, selection=selection)
    assert not (tmp_path / "x").exists()


def test_bad_decisions_files_and_exports_are_one_line_errors(month: tuple, tmp_path: Path) -> None:
    blobs, items, selection = month
    bad = tmp_path / "decisions.json"
    cases = {
        "{not json": "not a readable decisions file",
        '["accept"]': 'expected {"decisions": {item id: "accept" or "reject"}}',
        '{"decisions": {"abc": "yes"}}': "decisions['abc']: expected accept or reject, got 'yes'",
    }
    for text, message in cases.items():
        bad.write_text(text)
        with pytest.raises(ConfigError) as e:
            read_decisions(bad)
        assert str(e.value).startswith(f"{bad}: ") and message in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="month '2025-13': expected YYYY-MM"):
        export_month(items, blobs, "2025-13", tmp_path / "m", MANIFEST, selection=selection)
    with pytest.raises(ConfigError, match="the manifest has no 'prompts'"):
        export_month(items, blobs, MONTH, tmp_path / "m", {"month": MONTH}, selection=selection)
    work = tmp_path / "work"
    work.mkdir()
    (work / "cache.sqlite").write_bytes(b"")
    with pytest.raises(ConfigError, match="holds something other than a month's export"):
        export_month(items, blobs, MONTH, work, MANIFEST, selection=selection)
    with pytest.raises(ConfigError, match="not a LiveBench month"):
        load_month(work)
