"""`fastmmeval run` end to end on a local task, with the socratic pipeline over a tiny LM."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import skimage.data

from fastmmeval.cli import main

PHOTOS = ["chelsea.png", "rocket.jpg", "coffee.png", "astronaut.png", "horse.png", "camera.png"]
MC_ROWS = [
    ("chelsea.png", ["cat", "rocket", "cup of coffee", "horse"], "A"),
    ("rocket.jpg", ["cat", "rocket", "cup of coffee", "horse"], "B"),
    ("coffee.png", ["cat", "rocket", "cup of coffee", "horse"], "C"),
    ("horse.png", ["cat", "rocket", "cup of coffee", "horse"], "D"),
]
TASKS = """\
task: local_vqa
group: local
dataset: {data_files: {test: vqa.jsonl}, image_root: images}
split: test
doc_id: id
doc_to_messages:
  - role: user
    content: [{image: image}, {text: "{question} Answer with one word."}]
target: answer
output_type: generate
extractor: first_word
metrics: [exact_match]
generation: {max_new_tokens: 6}
---
task: local_mc
group: local
dataset: {data_files: {test: mc.jsonl}, image_root: images}
split: test
doc_id: id
doc_to_messages:
  - role: user
    content: [{image: image}, {text: "What is shown?\\n{options}\\nAnswer with the option's letter."}]
target: answer
choices: choices
output_type: multiple_choice
mc_mode: ppl
metrics: [accuracy]
"""


@pytest.fixture()
def task_dir(tmp_path: Path) -> Path:
    """Two small tasks over real photos; vqa doc 'broken' has an unreadable image and doc
    'noq' lacks the question field."""
    folder = tmp_path / "tasks"
    (folder / "images").mkdir(parents=True)
    for name in PHOTOS:
        shutil.copy(Path(skimage.data.__file__).parent / name, folder / "images" / name)
    (folder / "images" / "broken.png").write_bytes(b"\x89PNG but not really")
    vqa = [
        {"id": f"v{i}", "image": p, "question": "What is this?", "answer": p.split(".")[0]}
        for i, p in enumerate(PHOTOS)
    ]
    vqa.append({"id": "broken", "image": "broken.png", "question": "What is this?", "answer": "x"})
    vqa.append({"id": "noq", "image": "coffee.png", "answer": "coffee"})
    mc = [{"id": f"m{i}", "image": p, "choices": c, "answer": a} for i, (p, c, a) in enumerate(MC_ROWS * 3)]
    (folder / "vqa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in vqa))
    (folder / "mc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in mc))
    for i, text in enumerate(TASKS.split("---\n")):
        (folder / f"task{i}.yaml").write_text(text)
    return folder


def run_args(tiny_lm_dir: Path, task_dir: Path, out: Path, *extra: str) -> list[str]:
    return [
        "run", "--model", "socratic", "--model_args", f"lm={tiny_lm_dir},ocr=false,tags=3",
        "--tasks", "local", "--include_path", str(task_dir), "--output_path", str(out), "--no_progress", *extra,
    ]  # fmt: skip


def only_run(out: Path) -> Path:
    [run] = [p for p in out.iterdir() if p.is_dir()]
    return run


def test_a_run_writes_manifest_results_and_a_sample_per_doc(tiny_lm_dir: Path, task_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    assert main(run_args(tiny_lm_dir, task_dir, out, "--batch_size", "4")) == 0
    run = only_run(out)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["config"]["tasks"] == ["local"] and set(manifest["task_fingerprints"]) == {"local_vqa", "local_mc"}
    assert str(tiny_lm_dir) in json.dumps(manifest["model_fingerprint"])
    results = json.loads((run / "results.json").read_text())["results"]

    vqa = results["local_vqa"]
    assert (vqa["n"], vqa["n_scored"], vqa["n_failed"]) == (8, 6, 2)
    assert vqa["failures"] == {"unreadable image": 1, "missing field": 1}
    assert 0.0 <= vqa["exact_match,none"] <= 1.0 and "exact_match_stderr,none" in vqa

    mc = results["local_mc"]
    assert (mc["n"], mc["n_failed"], mc["mc_mode"]) == (12, 0, "ppl")
    assert mc["extract_rules"] == {"loglikelihood_argmax": 12}

    samples = [json.loads(line) for line in (run / "samples" / "local_vqa.jsonl").read_text().splitlines()]
    by_id = {s["doc_id"]: s for s in samples}
    assert by_id["broken"]["failed"].startswith("task local_vqa, doc broken, field 'image': unreadable image")
    assert by_id["noq"]["failed"] == "task local_vqa, doc noq: missing field 'question' used by the prompt template"
    ok = by_id["v0"]
    assert ok["failed"] is None and ok["prompt"][-1]["content"].startswith("<image>What is this?")
    assert ok["target"] == ["chelsea"] and isinstance(ok["response"], str) and "extract_rule" in ok


def test_results_do_not_depend_on_batch_size(tiny_lm_dir: Path, task_dir: Path, tmp_path: Path) -> None:
    metrics = []
    for bs in ("1", "5"):
        out = tmp_path / f"bs{bs}"
        assert main(run_args(tiny_lm_dir, task_dir, out, "--batch_size", bs)) == 0
        results = json.loads((only_run(out) / "results.json").read_text())["results"]
        metrics.append({t: r["metrics"] for t, r in results.items()})
    assert metrics[0] == metrics[1]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("--tasks", "locl_vqa"), "unknown task 'locl_vqa'; did you mean local_vqa"),
        (("--model", "socratc"), "unknown model 'socratc'; did you mean socratic"),
        (("--model_args", "lm=x,tgas=3"), "unknown argument 'tgas'; did you mean tags"),
    ],
)
def test_bad_names_fail_in_one_line(
    task_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], change, message
) -> None:
    args = run_args(Path("unused"), task_dir, tmp_path / "runs")
    args[args.index(change[0]) + 1] = change[1]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert main(["--debug", *args]) == 1
    assert "Traceback" in capsys.readouterr().err
