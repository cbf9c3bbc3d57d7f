"""Benchmark task-file features: `where` filters, `process_doc` hooks, result keys renamed with
`as`, hub datasets read offline from `--data_dir`, `tasks --download`, and protocol cards."""

import json
from pathlib import Path
from typing import Any

import datasets
import pytest
from task_fixtures import photo, run_task

from fastmmeval.cli import main
from fastmmeval.errors import ConfigError, DocError
from fastmmeval.tasks.card import protocol_card
from fastmmeval.tasks.catalog import Catalog
from fastmmeval.tasks.config import parse_task
from fastmmeval.tasks.processors import DOC_PROCESSORS
from fastmmeval.tasks.sources import DATA_DIR_ENV, saved_split_dir
from fastmmeval.tasks.task import DocRef, Task

HUB_TASK = """\
task: hub_yesno
group: [hubby]
dataset: {path: someone/yesno-bench, name: en}
split: test
docs: 3
where: {category: kept}
process_doc: test_upper_answer
doc_id: qid
doc_to_messages:
  - role: user
    content:
      - image: image
      - text: "{question}\\nAnswer yes or no."
output_type: generate
target: upper
extractor: first_word
metrics: [{metric: exact_match, as: hub_accuracy}]
generation: {max_new_tokens: 4}
lmms_eval:
  task: hub_yesno
  differences: {an_example: "none: an example"}
"""

FEATURES = datasets.Features(
    {
        "qid": datasets.Value("string"),
        "question": datasets.Value("string"),
        "answer": datasets.Value("string"),
        "category": datasets.Value("string"),
        "image": datasets.Image(),
    }
)


@DOC_PROCESSORS.register("test_upper_answer")
def _upper(row: dict[str, Any]) -> dict[str, Any]:
    if row["answer"] == "broken":
        raise DocError("answer is broken")
    return {"upper": row["answer"].upper()}


def _rows() -> list[dict[str, Any]]:
    answers = ["yes", "no", "yes", "no", "broken"]
    categories = ["kept", "kept", "dropped", "kept", "dropped"]
    return [
        {"qid": f"q{i}", "question": f"Is this photo number {i}?", "answer": a, "category": c, "image": photo(i, 48)}
        for i, (a, c) in enumerate(zip(answers, categories, strict=True))
    ]


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(task folder, data dir) with the hub task's split saved where --data_dir finds it."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "hub_yesno.yaml").write_text(HUB_TASK)
    config = parse_task(tasks / "hub_yesno.yaml")
    data = tmp_path / "data"
    folder = saved_split_dir(data, config.dataset, "test")
    datasets.Dataset.from_list(_rows(), features=FEATURES).save_to_disk(str(folder))
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    return tasks, data


def test_a_hub_task_runs_offline_from_data_dir_with_its_filter_hook_and_result_key(tmp_path, hub) -> None:
    tasks, data = hub
    answers = {"q0": "Yes.", "q1": "yes", "q3": "no"}
    results, samples = run_task(tmp_path, data, "hub_yesno", answers, list(answers), "--include_path", str(tasks))
    assert [s["doc_id"] for s in samples] == ["q0", "q1", "q3"]  # `where` kept the category "kept" rows
    assert [s["target"] for s in samples] == [["YES"], ["NO"], ["NO"]]  # from the process_doc hook
    assert results["hub_accuracy,none"] == pytest.approx(2 / 3)  # exact_match, under the task file's key
    assert results["headline_metric"] == "exact_match" and results["headline_as"] == "hub_accuracy"
    assert "Is this photo number 1?\nAnswer yes or no." in samples[1]["prompt"][0]["content"]


def test_without_data_dir_an_offline_hub_task_fails_in_one_line_naming_the_remedy(hub, monkeypatch) -> None:
    tasks, _ = hub
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    task = Task(Catalog([tasks]).tasks.get("hub_yesno"))
    with pytest.raises(ConfigError, match=r"someone/yesno-bench.*split 'test'.*--data_dir"):
        task.doc_refs()


def test_a_failing_hook_names_the_doc(hub, monkeypatch) -> None:
    tasks, data = hub
    monkeypatch.setenv(DATA_DIR_ENV, str(data))
    task = Task(Catalog([tasks]).tasks.get("hub_yesno"))
    assert task.rows.column("qid")[4] == "q4"  # a row the `where` filter drops, read directly
    with pytest.raises(DocError, match="task hub_yesno, doc q4: answer is broken"):
        task.doc(DocRef(4, "q4"))


def test_the_protocol_card_shows_the_data_prompt_metrics_and_differences(hub, monkeypatch) -> None:
    tasks, data = hub
    monkeypatch.setenv(DATA_DIR_ENV, str(data))
    card = protocol_card(Catalog([tasks]).tasks.get("hub_yesno"))
    assert card["dataset"] == "someone/yesno-bench" and card["dataset_config"] == "en" and card["split"] == "test"
    assert card["docs_expected"] == 3 and card["docs"] == 3 and card["where"] == {"category": "kept"}
    assert card["metrics"] == {"exact_match": "hub_accuracy"} and card["process_doc"] == "test_upper_answer"
    assert card["example"]["messages"] == ["[user] <image>Is this photo number 0?\nAnswer yes or no."]
    assert card["example"]["target"] == ["YES"]
    assert list(card["differences_from_lmms_eval"].values()) == ["none: an example"]
    assert card["lmms_eval_task"] == "hub_yesno" and len(card["protocol_fingerprint"]) == 16


def test_tasks_info_prints_a_card_even_without_the_data(hub, capsys, monkeypatch) -> None:
    tasks, _ = hub
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    assert main(["tasks", "--include_path", str(tasks), "--info", "hub_yesno", "--json"]) == 0
    card = json.loads(capsys.readouterr().out)
    assert card["docs_expected"] == 3 and "docs" not in card and "--data_dir" in card["data_error"]


def test_download_saves_each_split_where_data_dir_reads_it(hub, tmp_path, monkeypatch) -> None:
    tasks, data = hub
    calls = []

    def fake_load(path, name=None, split=None, revision=None, cache_dir=None):
        calls.append((path, name, split))
        return datasets.Dataset.from_list(_rows()[:2], features=FEATURES)

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    out = tmp_path / "downloaded"
    assert main(["tasks", "--include_path", str(tasks), "--download", "hubby", "--data_dir", str(out)]) == 0
    assert calls == [("someone/yesno-bench", "en", "test")]
    saved = datasets.load_from_disk(str(out / "someone" / "yesno-bench" / "en" / "test"))
    assert saved["qid"] == ["q0", "q1"]
    assert main(["tasks", "--include_path", str(tasks), "--download", "hubby"]) == 1  # needs --data_dir


def test_download_also_saves_the_data_a_processor_reads(tmp_path, monkeypatch) -> None:
    calls = []

    def fake_load(path, name=None, split=None, **_):
        calls.append((path, name, split))
        return datasets.Dataset.from_list([{"x": 1}])

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    assert main(["tasks", "--download", "gqa", "--data_dir", str(tmp_path)]) == 0
    gqa = Catalog().tasks.get("gqa").dataset
    assert sorted(calls) == [(gqa.path, "testdev_balanced_images", "testdev"), (gqa.path, gqa.name, "testdev")]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.replace("as: hub_accuracy", "named: x"), r"each entry is a metric name or"),
        (lambda s: s.replace("[{metric: exact_match, as: hub_accuracy}]", "[exact_match, exact_match]"),
         r"each result key once"),
        (lambda s: s.replace("{category: kept}", "{category: [kept]}"), r"field 'where'"),
        (lambda s: s.replace("task: hub_yesno\n  differences", "tsk: hub_yesno\n  differences"),
         r"unknown lmms_eval setting"),
    ],
)  # fmt: skip
def test_bad_new_fields_fail_with_file_and_line(tmp_path, edit, message) -> None:
    (tmp_path / "t.yaml").write_text(edit(HUB_TASK))
    with pytest.raises(ConfigError, match=message):
        parse_task(tmp_path / "t.yaml")


def test_result_keys_and_notes_do_not_change_the_fingerprint(tmp_path) -> None:
    (tmp_path / "a.yaml").write_text(HUB_TASK)
    (tmp_path / "b.yaml").write_text(HUB_TASK.replace("as: hub_accuracy", "as: other").replace("docs: 3", "docs: 4"))
    (tmp_path / "c.yaml").write_text(HUB_TASK.replace("{category: kept}", "{category: dropped}"))
    a, b, c = (parse_task(tmp_path / f"{n}.yaml").fingerprint() for n in "abc")
    assert a == b != c


def test_every_builtin_task_has_a_card(monkeypatch) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    catalog = Catalog()
    for name, config in catalog.tasks.items():
        card = protocol_card(config)
        assert card["task"] == name and card["prompt"] and (card["metrics"] or card["submission"]), name
        if config.dataset.builder:
            assert card["docs"] > 0 and card["example"]["messages"], name
        else:  # the hub is unreachable here: the card says so, and still shows the protocol
            assert "--data_dir" in card["data_error"], name
        if config.dataset.path:
            assert config.docs, f"{name}: a hub task records its full doc count (`docs:`)"
            assert config.lmms_eval is not None, f"{name}: a hub task names the lmms-eval task it reproduces"
