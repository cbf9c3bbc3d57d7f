"""Task files: the schema, its one-line errors, and the catalog of tasks and groups."""

from pathlib import Path

import pytest

from fastmmeval.errors import ConfigError
from fastmmeval.tasks.catalog import Catalog
from fastmmeval.tasks.config import parse_task

GOOD = """\
task: my_vqa
version: 2
group: [mine]
dataset:
  data_files: {test: data.jsonl}
split: test
doc_id: qid
doc_to_messages:
  - role: user
    content:
      - image: image
      - text: "{question}\\nAnswer with one word."
target: answer
output_type: generate
extractor: first_word
metrics: [exact_match]
generation: {max_new_tokens: 4, stop: ["\\n"]}
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def test_a_task_file_parses_into_a_protocol(tmp_path: Path) -> None:
    config = parse_task(write(tmp_path, "t.yaml", GOOD))
    assert config.task == "my_vqa" and config.version == "2" and config.group == ("mine",)
    assert config.doc_to_messages[0].parts == (("image", "image"), ("text", "{question}\nAnswer with one word."))
    assert config.generation.max_new_tokens == 4 and config.generation.stop == ("\n",)
    assert config.dataset.data_files == {"test": ["data.jsonl"]} and config.dataset.base_dir == str(tmp_path)


def test_the_fingerprint_follows_the_protocol_not_the_prose(tmp_path: Path) -> None:
    base = parse_task(write(tmp_path, "a.yaml", GOOD)).fingerprint()
    described = parse_task(write(tmp_path, "b.yaml", GOOD + "description: words\n")).fingerprint()
    reprompted = parse_task(write(tmp_path, "c.yaml", GOOD.replace("one word", "a word"))).fingerprint()
    assert base == described != reprompted


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.replace("metrics:", "metrix:"), r"t.yaml:16: field 'metrix': unknown task setting; did you mean"),
        (lambda s: s.replace("[exact_match]", "[exact_match"), r"t.yaml:\d+: malformed YAML"),
        (lambda s: s + "process: !function utils.process\n", r"t.yaml:18: .*tag !function is not allowed"),
        (lambda s: s.replace("split: test\n", ""), r"missing required field 'split'"),
        (lambda s: s.replace("output_type: generate", "output_type: mcq"), r"t.yaml:14: field 'output_type'"),
        (lambda s: s.replace("max_new_tokens: 4", "max_new_tokens: four"), r"field 'max_new_tokens': expected int"),
        (lambda s: s.replace("{question}", "{question"), r"field 'text': bad template"),
    ],
)
def test_malformed_task_files_fail_with_file_and_line(tmp_path: Path, edit, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_task(write(tmp_path, "t.yaml", edit(GOOD)))


def test_catalog_resolves_tasks_and_groups_and_suggests_close_names(tmp_path: Path) -> None:
    write(tmp_path, "t.yaml", GOOD)
    write(tmp_path, "g.yaml", "group: both\ntasks: [my_vqa, demo_digits]\n")
    catalog = Catalog([tmp_path])
    assert [c.task for c in catalog.resolve(["mine"])] == ["my_vqa"]
    assert [c.task for c in catalog.resolve(["both", "my_vqa"])] == ["my_vqa", "demo_digits"]
    assert {"demo_objects", "demo_digits", "demo_yesno"} <= set(catalog.groups["demo"])
    with pytest.raises(ConfigError, match="unknown task 'my_vq'; did you mean my_vqa"):
        catalog.resolve(["my_vq"])


def test_a_group_naming_an_unknown_task_is_refused(tmp_path: Path) -> None:
    write(tmp_path, "g.yaml", "group: broken\ntasks: [no_such_task]\n")
    with pytest.raises(ConfigError, match="group 'broken' names unknown task 'no_such_task'"):
        Catalog([tmp_path])


def test_lite_tasks_belong_to_lmms_eval_lite_only_so_a_full_group_counts_each_benchmark_once() -> None:
    catalog = Catalog()
    lite = set(catalog.groups["lmms_eval_lite"])
    assert lite and all(name.endswith("_lite") for name in lite)
    for group, members in catalog.groups.items():
        if group != "lmms_eval_lite":
            assert not lite & set(members), f"group {group} also holds lite tasks {sorted(lite & set(members))}"
    for group in ("mcq", "doc", "vqa", "caption"):
        configs = catalog.resolve([group])
        data = [(c.dataset.path, c.dataset.name, c.split, str(dict(c.where))) for c in configs]
        assert len(set(data)) == len(data), f"--tasks {group} scores a benchmark twice in overall"
