"""Lite selection and export: baselines, the selection files, and `<task>_lite` subset tasks."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from fastmmeval.cli import main
from fastmmeval.errors import ConfigError
from fastmmeval.lite.baselines import kmeans_subset, random_subset, stratified_subset
from fastmmeval.lite.embed import Embeddings
from fastmmeval.lite.export import SelectOptions, read_selection, select, select_task
from fastmmeval.tasks.catalog import Catalog
from fastmmeval.tasks.task import Task


def test_random_subsets_are_seeded_and_distinct() -> None:
    a, b = random_subset(100, 30, seed=1), random_subset(100, 30, seed=1)
    assert a.dtype == np.int64 and len(set(a.tolist())) == 30 and (a == b).all()
    assert (a != random_subset(100, 30, seed=2)).any()
    with pytest.raises(ConfigError, match="1..100"):
        random_subset(100, 101)


@pytest.mark.filterwarnings("ignore:Number of distinct clusters")
def test_kmeans_takes_the_doc_nearest_each_centroid() -> None:
    rng = np.random.default_rng(0)
    centers = np.array([[0, 0], [10, 0], [0, 10]], np.float32)
    x = np.vstack([c + rng.normal(scale=0.3, size=(20, 2)) for c in centers]).astype(np.float32)
    picked = kmeans_subset(x, 3, seed=0)
    assert sorted(int(i) // 20 for i in picked) == [0, 1, 2]  # one doc per cluster
    dup = np.zeros((5, 2), np.float32)  # all docs identical: centroids share a nearest doc
    assert sorted(kmeans_subset(dup, 3).tolist()) == sorted(set(kmeans_subset(dup, 3).tolist()))


def test_stratified_keeps_category_shares() -> None:
    categories = ["a"] * 50 + ["b"] * 30 + ["c"] * 20
    picked = stratified_subset(categories, 10, seed=0)
    assert Counter(categories[i] for i in picked) == {"a": 5, "b": 3, "c": 2}
    odd = stratified_subset(["a"] * 5 + ["b"] * 4 + ["c"], 4, seed=0)  # quotas 2.0, 1.6, 0.4
    assert Counter((["a"] * 5 + ["b"] * 4 + ["c"])[i] for i in odd) == {"a": 2, "b": 2}


def test_select_write_and_run_only_the_chosen_docs(tmp_path: Path) -> None:
    out = tmp_path / "lite"
    (sel,) = select(["demo_yesno"], out, SelectOptions(size=12, method="random", seed=3, progress=False))
    assert len(sel.doc_ids) == 12 and sel.n_docs == 32 and sel.method == "random"
    assert read_selection(out / "demo_yesno.json") == sel
    assert (out / "demo_yesno.txt").read_text().split() == sel.doc_ids
    catalog = Catalog([out])
    lite = Task(catalog.tasks.get("demo_yesno_lite"))
    assert sorted(r.id for r in lite.doc_refs()) == sorted(sel.doc_ids)
    full = Task(catalog.tasks.get("demo_yesno"))
    order = [r.id for r in full.doc_refs()]
    assert [r.id for r in lite.doc_refs(limit=4)] == [i for i in order if i in set(sel.doc_ids)][:4]
    assert catalog.groups["lite"] == ["demo_yesno_lite"] and "demo_yesno_lite" not in catalog.groups["demo"]
    assert lite.fingerprint() != full.fingerprint() and sel.task_fingerprint == full.fingerprint()


def test_kcenter_selection_uses_the_embeddings(tmp_path: Path) -> None:
    task = Task(Catalog().tasks.get("demo_digits"))
    ids = [r.id for r in task.doc_refs()]
    rng = np.random.default_rng(0)
    image, text = rng.normal(size=(len(ids), 6)).astype(np.float32), rng.normal(size=(len(ids), 4)).astype(np.float32)
    emb = Embeddings(ids, image, text, np.ones(len(ids), bool), {"image": {"e": 1}, "text": {"e": 2}}, {})
    opts = SelectOptions(size=8, seed=0, progress=False)
    sel = select_task(task, opts, embed=lambda t: emb)
    from fastmmeval.lite.kcenter import covering_radius, greedy_k_center_reference

    x = emb.joint(0.5)
    reference = greedy_k_center_reference(x, 8, seed=0)
    assert len(set(sel.doc_ids)) == 8 and sel.encoders == emb.encoders and sel.image_weight == 0.5
    assert sel.covering_radius == pytest.approx(covering_radius(x, reference), rel=1e-3)
    limited = select_task(task, SelectOptions(size=3, limit=10, progress=False), embed=lambda t: emb)
    assert set(limited.doc_ids) <= set(ids[:10]) and limited.limit == 10


def test_a_size_beyond_the_task_keeps_it_whole(tmp_path: Path) -> None:
    (sel,) = select(["demo_objects"], tmp_path, SelectOptions(size=1000, method="random", progress=False))
    assert len(sel.doc_ids) == sel.n_docs == 31 and "kept whole" in sel.note


def test_cli_select_stratified_needs_a_category_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["lite", "select", "--tasks", "demo_objects", "--size", "5", "--out", str(tmp_path), "--method",
            "stratified", "--no_progress"]
    assert main(argv) == 1 and "--category_field" in capsys.readouterr().err
    assert main([*argv, "--category_field", "no_such_field"]) == 1
    assert main([*argv, "--category_field", "answer"]) == 0
    assert len(json.loads((tmp_path / "demo_objects.json").read_text())["doc_ids"]) == 5


def test_subset_files_name_what_is_wrong(tmp_path: Path) -> None:
    (tmp_path / "ids.txt").write_text("chelsea_cat\nno_such_doc\n")
    (tmp_path / "bad_lite.yaml").write_text("task: bad_lite\nsubset_of: demo_yesno\ndoc_ids: ids.txt\n")
    with pytest.raises(ConfigError, match="1 listed doc id.*no_such_doc"):
        Task(Catalog([tmp_path]).tasks.get("bad_lite")).doc_refs()
    (tmp_path / "bad_lite.yaml").write_text("task: bad_lite\nsubset_of: demo_yesnoo\ndoc_ids: ids.txt\n")
    with pytest.raises(ConfigError, match="bad_lite.yaml:2: subset_of: unknown task 'demo_yesnoo'"):
        Catalog([tmp_path])
    (tmp_path / "bad_lite.yaml").write_text("task: bad_lite\nsubset_of: demo_yesno\ndoc_ids: missing.txt\n")
    with pytest.raises(ConfigError, match="cannot read doc ids"):
        Catalog([tmp_path])


def test_a_subset_file_may_list_its_ids_in_a_selection_json(tmp_path: Path) -> None:
    (tmp_path / "ids.json").write_text(json.dumps({"doc_ids": ["chelsea_dog", "chelsea_cat"]}))
    (tmp_path / "two_lite.yaml").write_text("task: two_lite\nsubset_of: demo_yesno\ndoc_ids: ids.json\n")
    task = Task(Catalog([tmp_path]).tasks.get("two_lite"))
    assert [r.id for r in task.doc_refs()] == ["chelsea_cat", "chelsea_dog"]  # dataset order
