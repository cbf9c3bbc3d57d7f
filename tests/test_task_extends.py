"""Task files inherit: `extends:` a task file or a task name, the child holding only what differs."""

from pathlib import Path

import pytest
from test_task_files import GOOD

from fastmmeval.errors import ConfigError
from fastmmeval.tasks.catalog import Catalog
from fastmmeval.tasks.config import parse_task

# A complete task file with an lmms_eval block to inherit.
PARENT = GOOD + 'lmms_eval:\n  task: my_vqa\n  differences: {one: first}\n'


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_child_file_holds_only_what_differs(tmp_path: Path) -> None:
    write(tmp_path, "parent.yaml", PARENT)
    child = write(
        tmp_path,
        "child.yaml",
        "task: my_vqa_small\nextends: parent.yaml\nsplit: small\ngeneration: {max_new_tokens: 8}\n"
        "lmms_eval: {task: my_vqa_small, differences: {two: second}}\n",
    )
    parent, config = parse_task(tmp_path / "parent.yaml"), parse_task(child)
    assert config.task == "my_vqa_small" and config.split == "small" and config.group == ("mine",)
    assert config.generation.max_new_tokens == 8 and config.generation.stop == ("\n",)  # mappings merge
    assert config.doc_to_messages == parent.doc_to_messages and config.metrics == parent.metrics
    assert config.lmms_eval is not None and config.lmms_eval.differences == {"one": "first", "two": "second"}
    assert config.dataset.base_dir == str(tmp_path)


def test_the_fingerprint_hashes_the_resolved_protocol(tmp_path: Path) -> None:
    write(tmp_path, "parent.yaml", PARENT)
    same = write(tmp_path, "same.yaml", "task: my_vqa\nextends: parent.yaml\ndescription: only prose differs\n")
    other = write(tmp_path, "other.yaml", "task: my_vqa\nextends: parent.yaml\ngeneration: {stop: null}\n")
    base = parse_task(tmp_path / "parent.yaml").fingerprint()
    assert parse_task(same).fingerprint() == base != parse_task(other).fingerprint()
    assert parse_task(other).generation.stop == ()  # null drops the inherited key


def test_the_catalog_resolves_a_parent_by_task_name_in_any_folder(tmp_path: Path) -> None:
    write(tmp_path, "a/parent.yaml", PARENT)
    write(tmp_path, "b/child.yaml", "task: child\nextends: my_vqa\nsplit: val\n")
    catalog = Catalog([tmp_path])
    child, parent = catalog.tasks.get("child"), catalog.tasks.get("my_vqa")
    assert child.split == "val" and child.metrics == parent.metrics and child.group == ("mine",)
    assert "child" in catalog.groups["mine"]
    # the inherited data files are found next to the file that names them
    assert child.dataset.base_dir == str(tmp_path / "a")


def test_a_parent_by_name_resolves_its_own_extends_in_its_own_folder(tmp_path: Path) -> None:
    # mmbench_en_dev extends the built-in `_mmbench.yaml`: a file outside this folder, but inside the parent's.
    write(tmp_path, "v1/mine.yaml", "task: mine\nextends: mmbench_en_dev\ndataset: {path: null, name: null, "
          "data_files: {dev: dev.parquet}}\n")  # fmt: skip
    mine, original = Catalog([tmp_path / "v1"]).tasks.get("mine"), Catalog().tasks.get("mmbench_en_dev")
    assert mine.metrics == original.metrics and mine.doc_to_messages == original.doc_to_messages
    assert mine.dataset.data_files == {"dev": ["dev.parquet"]} and mine.dataset.base_dir == str(tmp_path / "v1")


def test_a_cycle_is_refused_with_file_and_line(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", "task: a\nextends: b\n")
    write(tmp_path, "b.yaml", "task: b\nsplit: x\nextends: a\n")
    with pytest.raises(ConfigError, match=r"b\.yaml:3: extends: 'a' makes a cycle \(a\.yaml -> b\.yaml -> a\.yaml\)"):
        Catalog([tmp_path])


@pytest.mark.parametrize(
    ("child", "message"),
    [
        ("task: c\nextends: nothing_here\n", r"c\.yaml:2: extends: no task named 'nothing_here'"),
        ("task: c\nextends: missing.yaml\n", r"c\.yaml:2: extends: no task file 'missing.yaml'"),
        ("task: c\nextends: ../../outside.yaml\n", r"c\.yaml:2: extends: '../../outside.yaml' is outside the task"),
        ("task: c\nextends: [a, b]\n", r"c\.yaml:2: field 'extends': expected a task file or a task name"),
        ("task: c\nextends: parent.yaml\nmetrics+: [bleu]\n", r"c\.yaml:3: field 'metrics\+': appends a list"),
    ],
)
def test_a_bad_extends_is_one_line_naming_file_and_line(tmp_path: Path, child: str, message: str) -> None:
    write(tmp_path, "tasks/parent.yaml", PARENT.replace("metrics: [exact_match]", "metrics: exact_match"))
    write(tmp_path, "tasks/c.yaml", child)
    with pytest.raises(ConfigError, match=message):
        Catalog([tmp_path / "tasks"])


def test_an_error_in_an_inherited_setting_points_into_the_parent(tmp_path: Path) -> None:
    write(tmp_path, "parent.yaml", PARENT.replace("output_type: generate", "output_type: mcq"))
    child = write(tmp_path, "child.yaml", "task: c\nextends: parent.yaml\n")
    with pytest.raises(ConfigError, match=r"parent\.yaml:14: field 'output_type'"):
        parse_task(child)


def test_a_template_file_is_no_task_of_its_own_but_a_parent_by_file(tmp_path: Path) -> None:
    write(tmp_path, "_shared.yaml", PARENT.replace("task: my_vqa\n", "", 1))
    write(tmp_path, "one.yaml", "task: one\nextends: _shared.yaml\nsplit: a\n")
    write(tmp_path, "two.yaml", "task: two\nextends: _shared.yaml\nsplit: b\n")
    catalog = Catalog([tmp_path])
    assert {"one", "two"} <= set(catalog.tasks) and "_shared" not in catalog.tasks
    assert catalog.tasks.get("one").metrics == catalog.tasks.get("two").metrics == ("exact_match",)
    write(tmp_path, "_mine.yaml", "task: mine\nextends: _shared.yaml\n")
    with pytest.raises(ConfigError, match=r"_mine\.yaml:1: a `_\*\.yaml` file is a template, not a task"):
        Catalog([tmp_path])



def test_a_template_is_a_parent_by_name_from_any_folder_the_first_folder_s_first(tmp_path: Path) -> None:
    """As a month built with `fastmmeval live` extends LiveBench's built-in template from its own folder."""
    write(tmp_path, "a/_shared.yaml", PARENT.replace("task: my_vqa\n", "", 1))
    write(tmp_path, "b/_shared.yaml", PARENT.replace("task: my_vqa\n", "", 1).replace("[exact_match]", "[anls]"))
    write(tmp_path, "b/child.yaml", "task: child\nextends: _shared\nsplit: val\n")
    child = Catalog([tmp_path / "a", tmp_path / "b"]).tasks.get("child")
    assert child.split == "val" and child.metrics == ("exact_match",)  # a's, the first folder's
    assert child.dataset.base_dir == str(tmp_path / "a")  # its data files are found next to the template
