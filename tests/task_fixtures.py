"""Fixtures for the benchmark task files: hub-schema datasets saved offline, a run of one task with
scripted answers, and lmms-eval 0.7.3's prompt for the same doc.

A fixture is a handful of rows in the exact schema of the task's hub dataset (same columns and
`datasets` feature types), saved where `fastmmeval tasks --download` would put it under a data
dir, so the task loads it through the real hub path (`--data_dir`)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import judge_fixtures  # noqa: F401  (registers scripted_student / scripted_judge)
import skimage
import yaml
from peer_lmms_eval import lmms_eval_module
from PIL import Image

from fastmmeval.cli import main
from fastmmeval.tasks.catalog import Catalog
from fastmmeval.tasks.config import DatasetSpec, TaskConfig
from fastmmeval.tasks.sources import saved_split_dir

PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png", "retina.jpg",
          "hubble_deep_field.jpg", "page.png", "text.png", "camera.png")  # fmt: skip
LEFTOVER = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*\}")


def photo(i: int, size: int = 96) -> Image.Image:
    """A real photo (scikit-image's sample data), small, RGB; i picks one of PHOTOS cyclically."""
    path = Path(skimage.__file__).parent / "data" / PHOTOS[i % len(PHOTOS)]
    image = Image.open(path).convert("RGB")
    image.thumbnail((size, size))
    return image


def task_config(name: str) -> TaskConfig:
    """The built-in task file called `name`."""
    return Catalog().tasks.get(name)


def save_split(data_dir: Path, config: TaskConfig, rows: list[dict[str, Any]], features: Any) -> Path:
    """Save `rows` (with `features`, a `datasets.Features` in the hub dataset's schema) as the
    split the task reads, where `--data_dir data_dir` finds it."""
    import datasets

    spec: DatasetSpec = config.dataset
    assert spec.path, f"{config.task} does not read a hub dataset"
    out = saved_split_dir(data_dir, spec, config.split)
    datasets.Dataset.from_list(rows, features=features).save_to_disk(str(out))
    return out


def run_task(
    tmp_path: Path,
    data_dir: Path,
    task: str,
    answers: Mapping[str, str] | Callable[[str], str],
    doc_ids: list[str],
    *extra: str,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run `task` on the fixture under `data_dir` with a scripted model answering each doc id
    (a mapping, or a function of the doc id); returns (the task's results, its samples)."""
    table = {f"{task}/{d}": (answers(d) if callable(answers) else answers[d]) for d in doc_ids}
    answers_file = tmp_path / f"answers_{len(list(tmp_path.glob('answers_*')))}.json"
    answers_file.write_text(json.dumps(table))
    out = tmp_path / "runs"
    rc = main([
        "run", "--model", "scripted_student", "--model_args", f"answers={answers_file}", "--tasks", task,
        "--data_dir", str(data_dir), "--output_path", str(out), "--no_progress", "--bootstrap_iters", "0", *extra,
    ])  # fmt: skip
    assert rc == 0, f"fastmmeval run failed on {task}"
    run = max(out.iterdir(), key=lambda p: p.stat().st_mtime)
    results = json.loads((run / "results.json").read_text())["results"][task]
    samples = [json.loads(line) for line in (run / "samples" / f"{task}.jsonl").read_text().splitlines()]
    return results, samples


def prompt_text(sample: dict[str, Any]) -> str:
    """The text of a sample's last prompt message (images shown as `<image>`)."""
    prompt = sample["prompt"]
    return prompt[-1]["content"] if isinstance(prompt, list) else str(prompt)


def assert_renders(samples: list[dict[str, Any]]) -> None:
    """No prompt has a leftover `{field}` slot and two different docs render differently."""
    texts = [prompt_text(s) for s in samples]
    for s, text in zip(samples, texts, strict=True):
        assert not LEFTOVER.search(text), f"doc {s['doc_id']}: leftover template slot in {text!r}"
    assert len(set(texts)) > 1, "every doc rendered the same prompt"


class _Tagged(yaml.SafeLoader):
    """Reads lmms-eval's task YAML, where hooks are `!function module.name` tags."""


_Tagged.add_multi_constructor("!", lambda loader, suffix, node: loader.construct_scalar(node))


def lmms_eval_yaml(task_dir: str, file: str) -> dict[str, Any]:
    """One of lmms-eval 0.7.3's task YAML files (`!function` hooks read as their names), merged
    over the file it `include`s."""
    import importlib.util

    spec = importlib.util.find_spec("lmms_eval")
    assert spec is not None and spec.submodule_search_locations
    folder = Path(spec.submodule_search_locations[0]) / "tasks" / task_dir
    data = yaml.load((folder / file).read_text(), Loader=_Tagged)  # noqa: S506 (SafeLoader subclass)
    if "include" in data:
        data = {**lmms_eval_yaml(task_dir, data.pop("include")), **data}
    return data


def lmms_eval_prompt(task_dir: str, file: str, doc: dict[str, Any]) -> str:
    """lmms-eval 0.7.3's prompt text for `doc` under the task file's default
    `lmms_eval_specific_kwargs` (its `doc_to_text` hook called from its own module)."""
    data = lmms_eval_yaml(task_dir, file)
    hook = data["doc_to_text"]
    module_name, func = hook.rsplit(".", 1)
    module = lmms_eval_module(f"tasks.{task_dir}.{module_name}")
    kwargs = (data.get("lmms_eval_specific_kwargs") or {}).get("default")
    fn = getattr(module, func)
    return fn(doc, kwargs) if kwargs is not None else fn(doc)


def judge_queries(
    monkeypatch: Any, tmp_path: Path, task_name: str, rows: list[dict[str, Any]], features: Any,
    answer: Callable[[dict[str, Any]], str],
) -> Iterator[tuple[dict[str, Any], str, list[tuple[str, Any, Any]]]]:
    """(row, the answer given, [(use, judge prompt, judge input)]) for each fixture row: the judge
    calls a run of the task would make for that answer (its data saved under tmp_path and read
    from there through $FASTMMEVAL_DATA_DIR)."""
    from fastmmeval.judge.pipeline import judge_calls
    from fastmmeval.protocol import Response
    from fastmmeval.tasks.sources import DATA_DIR_ENV
    from fastmmeval.tasks.task import Task

    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    save_split(tmp_path, task_config(task_name), rows, features)
    task = Task(task_config(task_name))
    for ref, row in zip(task.doc_refs(), rows, strict=True):
        doc = task.doc(ref)
        request = task.request(doc, seed=0)
        text = answer(row)
        yield row, text, judge_calls(task, doc, request, Response(request.id, text=text))
