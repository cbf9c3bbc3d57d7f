"""`fastmmeval tasks` lists each task's doc count and where it comes from: counted in the data on this
machine (a split saved under --data_dir, the Hugging Face datasets cache, local files), listed in a subset's
id file, or only declared by the task file (`docs:`), without loading the data."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets
import pytest
from datasets.naming import camelcase_to_snakecase
from task_fixtures import save_split, task_config
from test_tasks_doc import DOCVQA, docvqa_rows
from test_tasks_mcq import SEEDBENCH, seedbench_rows

from fastmmeval.cli import main
from fastmmeval.tasks.counts import COUNTED, DECLARED, LISTED, DocCount, doc_count
from fastmmeval.tasks.sources import DATA_DIR_ENV
from fastmmeval.tasks.task import Task


def listing(capsys, *args: str) -> dict[str, tuple[str, str]]:
    """(Docs, Docs from) of each task in the `fastmmeval tasks` table."""
    assert main(["tasks", *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[1].split("\t")
    rows = [line.split("\t") for line in lines[2:] if "\t" in line]
    docs, source = header.index("Docs"), header.index("Docs from")
    return {row[0]: (row[docs], row[source]) for row in rows}


@pytest.fixture
def no_data(monkeypatch, tmp_path: Path) -> None:
    """No --data_dir and an empty Hugging Face datasets cache."""
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "empty_cache"))


def test_without_data_a_hub_task_shows_its_declared_count_and_a_subset_its_listed_ids(no_data, tmp_path: Path,
                                                                                       capsys) -> None:
    (tmp_path / "ids.txt").write_text("0\n2\n")
    (tmp_path / "docvqa_pair.yaml").write_text("task: docvqa_pair\nsubset_of: docvqa_test\ndoc_ids: ids.txt\n")
    shown = listing(capsys, "--include_path", str(tmp_path))
    assert shown["docvqa_test"] == ("5188", DECLARED) and shown["mmmu_test"] == ("10500", DECLARED)
    assert shown["docvqa_pair"] == ("2", LISTED)


def test_a_split_saved_under_data_dir_is_counted_without_decoding_an_image(no_data, tmp_path: Path, capsys,
                                                                          monkeypatch) -> None:
    save_split(tmp_path / "data", task_config("docvqa_test"), docvqa_rows(), DOCVQA)
    save_split(tmp_path / "data", task_config("seedbench"), seedbench_rows(), SEEDBENCH)
    monkeypatch.setattr("PIL.Image.open", lambda *a, **k: pytest.fail("the listing decoded an image"))
    shown = listing(capsys, "--data_dir", str(tmp_path / "data"))
    assert shown["docvqa_test"] == ("3", COUNTED) and shown["docvqa_val"] == ("5349", DECLARED)
    assert shown["seedbench"] == ("4", COUNTED)  # the rows its `where: {data_type: image}` keeps, of 5


def test_a_split_in_the_hugging_face_datasets_cache_is_counted_as_datasets_finds_it(tmp_path: Path,
                                                                                    monkeypatch) -> None:
    """A cache laid out as `datasets` writes it (ROOT/<owner>___<snake_case name>/<config>/<version>/<hash>/)."""
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    cache = tmp_path / "hf_cache"
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)  # read once, when datasets was imported
    saved = tmp_path / "saved"
    datasets.Dataset.from_list(docvqa_rows(), features=DOCVQA).save_to_disk(str(saved))
    name = camelcase_to_snakecase("DocVQA")
    copy = cache / f"lmms-lab-encoder___{name}" / "DocVQA" / "0.0.0" / "0123abcd"
    copy.mkdir(parents=True)
    shutil.copy(saved / "data-00000-of-00001.arrow", copy / f"{name}-test.arrow")
    info = json.loads((saved / "dataset_info.json").read_text())
    info.update(config_name="DocVQA", dataset_name=name, builder_name="parquet",
                splits={"test": {"name": "test", "num_examples": 3}},
                version={"version_str": "0.0.0", "major": 0, "minor": 0, "patch": 0})  # fmt: skip
    (copy / "dataset_info.json").write_text(json.dumps(info))
    config = task_config("docvqa_test")
    assert doc_count(config) == DocCount(3, COUNTED)
    assert len(Task(config).doc_refs()) == 3  # what a run loads from there (offline)
    assert doc_count(task_config("docvqa_val")) == DocCount(5349, DECLARED)  # that copy has no validation split


def test_local_files_are_counted_and_a_missing_one_leaves_the_declared_count(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"q": "a", "kind": "x"}\n\n{"q": "b", "kind": "y"}\n{"q": "c", "kind": "x"}\n')
    task = tmp_path / "tasks" / "mine.yaml"
    task.parent.mkdir()
    task.write_text(f"task: mine\ndataset: {{data_files: {{test: {rows}}}}}\nsplit: test\ndocs: 9\nwhere: {{kind: x}}\n"
                    "doc_to_messages: [{role: user, content: [{text: '{q}'}]}]\ntarget: q\noutput_type: generate\n"
                    "extractor: raw\nmetrics: [exact_match]\n")  # fmt: skip
    from fastmmeval.tasks.catalog import Catalog

    config = Catalog([task.parent]).tasks.get("mine")
    assert doc_count(config) == DocCount(2, COUNTED)
    rows.unlink()
    assert doc_count(config) == DocCount(9, DECLARED)
