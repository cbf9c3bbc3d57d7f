"""Captioning tasks (group `caption`): COCO 2014/2017, Flickr30k, NoCaps, TextCaps and RefCOCO/+/g
region captions, each run end to end on a fixture in its hub schema and compared with lmms-eval
0.7.3: the prompt, the references its `process_results` scores against, its result keys, the red
region box its `doc_to_visual` draws, and (for one task) its pycocoevalcap aggregation itself.

Fixture schemas come from the lmms-lab dataset cards (lmms-eval 0.7.3 reads the same datasets
through the lmms-lab-encoder mirrors); lmms-lab/COCO-Caption's card was not found, so its schema is
assumed equal to COCO-Caption2017's (same uploader and columns read by the same utils.py), and Lite
configs are assumed to keep their full dataset's columns (the refcoco_bbox_val card shows it does).
Values such as ids and urls are made up in each dataset's format."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import datasets
import numpy as np
import pytest
from peer_lmms_eval import lmms_eval_module
from task_fixtures import (
    LEFTOVER,
    lmms_eval_prompt,
    lmms_eval_yaml,
    photo,
    prompt_text,
    run_task,
    save_split,
    task_config,
)

from fastmmeval.errors import DocError
from fastmmeval.tasks.config import TaskConfig
from fastmmeval.tasks.processors import DOC_PROCESSORS
from fastmmeval.tasks.render import render_messages
from fastmmeval.tasks.sources import DATA_DIR_ENV
from fastmmeval.tasks.task import Task

# Five references per photo (photo(i) for i = 0..3: astronaut, cat, coffee, rocket).
CAPTIONS = [
    [
        "An astronaut in a white suit poses in front of an American flag.",
        "A smiling woman astronaut holding her helmet.",
        "Portrait of a female astronaut beside a flag.",
        "An astronaut wearing an orange and white spacesuit.",
        "A woman in a space suit stands near the US flag.",
    ],
    [
        "A tabby cat lying on a blanket.",
        "A striped cat looking to the side.",
        "Close up of an orange and gray tabby cat.",
        "The cat rests with its eyes open.",
        "A small tabby cat sitting indoors.",
    ],
    [
        "A cup of coffee with latte art on a saucer.",
        "A white mug of cappuccino on a red table.",
        "Coffee with a leaf pattern in the foam.",
        "A latte sits on a plate beside a spoon.",
        "Overhead view of a cup of coffee.",
    ],
    [
        "A rocket launches into a blue sky.",
        "The space shuttle lifting off with a trail of smoke.",
        "Rocket taking off from the launch pad.",
        "A shuttle launch with bright flames and smoke.",
        "A spacecraft rises above the launch tower.",
    ],
]
# Referring expressions of one region per photo; the first has 4+ words so the corpus has 4-grams.
EXPRESSIONS = [
    ["woman in the white spacesuit", "astronaut on the left"],
    ["tabby cat with open eyes", "cat face"],
    ["white cup in the middle", "coffee cup"],
    ["rocket with its smoke trail", "shuttle"],
]
# COCO-style boxes (x, y, width, height) with fractional corners, inside 64-pixel photos.
BOXES = [[3.25, 4.5, 30.0, 40.75], [10.5, 2.0, 45.25, 30.0], [0.0, 0.0, 63.0, 42.0], [20.7, 5.5, 20.0, 50.3]]
# Shares no word with any reference, nor a stem, synonym or paraphrase METEOR would match (it pairs
# "juggle" with a word of the coffee captions), so every metric gives it its minimum, 0.
WRONG = "Purple zebras playing violins."
N = len(CAPTIONS)


def _coco_rows(year: int) -> list[dict[str, Any]]:
    names = [f"COCO_val2014_{391895 + i:012d}.jpg" if year == 2014 else f"{397133 + i:012d}.jpg" for i in range(N)]
    return [
        {
            "question_id": name,
            "image": photo(i, 64),
            "question": "Please carefully observe the image and come up with a caption for the image",
            "answer": CAPTIONS[i],
            "id": 397133 + i,
            "license": 1,
            "file_name": name,
            "coco_url": f"http://images.cocodataset.org/val{year}/{name}",
            "height": 64,
            "width": 64,
            "date_captured": "2013-11-14 17:02:52",
        }
        for i, name in enumerate(names)
    ]


COCO_FEATURES = datasets.Features(
    {
        "question_id": datasets.Value("string"),
        "image": datasets.Image(),
        "question": datasets.Value("string"),
        "answer": datasets.Sequence(datasets.Value("string")),
        "id": datasets.Value("int64"),
        "license": datasets.Value("int8"),
        "file_name": datasets.Value("string"),
        "coco_url": datasets.Value("string"),
        "height": datasets.Value("int32"),
        "width": datasets.Value("int32"),
        "date_captured": datasets.Value("string"),
    }
)
FLICKR_FEATURES = datasets.Features(
    {
        "image": datasets.Image(),
        "caption": datasets.Sequence(datasets.Value("string")),
        "sentids": datasets.Sequence(datasets.Value("string")),
        "img_id": datasets.Value("string"),
        "filename": datasets.Value("string"),
    }
)
NOCAPS_FEATURES = datasets.Features(
    {
        "image": datasets.Image(),
        "image_coco_url": datasets.Value("string"),
        "image_date_captured": datasets.Value("string"),
        "image_file_name": datasets.Value("string"),
        "image_height": datasets.Value("int32"),
        "image_width": datasets.Value("int32"),
        "image_id": datasets.Value("int32"),
        "image_license": datasets.Value("int8"),
        "image_open_images_id": datasets.Value("string"),
        "annotations_ids": datasets.Sequence(datasets.Value("int32")),
        "annotations_captions": datasets.Sequence(datasets.Value("string")),
    }
)
TEXTCAPS_FEATURES = datasets.Features(
    {
        "question_id": datasets.Value("string"),
        "question": datasets.Value("string"),
        "image": datasets.Image(),
        "image_id": datasets.Value("string"),
        "image_classes": datasets.Sequence(datasets.Value("string")),
        "flickr_original_url": datasets.Value("string"),
        "flickr_300k_url": datasets.Value("string"),
        "image_width": datasets.Value("int64"),
        "image_height": datasets.Value("int64"),
        "set_name": datasets.Value("string"),
        "image_name": datasets.Value("string"),
        "image_path": datasets.Value("string"),
        "caption_id": datasets.Sequence(datasets.Value("int64")),
        "caption_str": datasets.Sequence(datasets.Value("string")),
        "reference_strs": datasets.Sequence(datasets.Value("string")),
    }
)
REFCOCO_FEATURES = datasets.Features(
    {
        "question_id": datasets.Value("string"),
        "image": datasets.Image(),
        "question": datasets.Value("string"),
        "answer": datasets.Sequence(datasets.Value("string")),
        "segmentation": datasets.Sequence(datasets.Value("float32")),
        "bbox": datasets.Sequence(datasets.Value("float32")),
        "iscrowd": datasets.Value("int8"),
        "file_name": datasets.Value("string"),
    }
)


def _flickr_rows() -> list[dict[str, Any]]:
    return [
        {
            "image": photo(i, 64),
            "caption": CAPTIONS[i],
            "sentids": [str(5 * (1000 + i) + k) for k in range(5)],
            "img_id": str(1000 + i),
            "filename": f"{1000092795 + i}.jpg",
        }
        for i in range(N)
    ]


def _nocaps_rows() -> list[dict[str, Any]]:
    return [
        {
            "image": photo(i, 64),
            "image_coco_url": f"https://s3.amazonaws.com/nocaps/val/{i:016x}.jpg",
            "image_date_captured": "2018-11-06 11:04:33",
            "image_file_name": f"{i:016x}.jpg",
            "image_height": 64,
            "image_width": 64,
            "image_id": i,
            "image_license": 0,
            "image_open_images_id": f"{i:016x}",
            "annotations_ids": [10 * i + k for k in range(5)],
            "annotations_captions": CAPTIONS[i],
        }
        for i in range(N)
    ]


def _textcaps_rows() -> list[dict[str, Any]]:
    return [
        {
            "question_id": str(i),
            "question": "caption",
            "image": photo(i, 64),
            "image_id": f"{0x0A0CA2A3D6FD9F50 + i:016x}",
            "image_classes": ["Person", "Poster"],
            "flickr_original_url": f"https://farm1.staticflickr.com/{i}/original.jpg",
            "flickr_300k_url": f"https://c1.staticflickr.com/{i}/300k.jpg",
            "image_width": 64,
            "image_height": 64,
            "set_name": "val",
            "image_name": f"{0x0A0CA2A3D6FD9F50 + i:016x}",
            "image_path": f"train/{0x0A0CA2A3D6FD9F50 + i:016x}.jpg",
            "caption_id": [5 * i + k for k in range(5)],
            "caption_str": CAPTIONS[i],
            "reference_strs": CAPTIONS[i],
        }
        for i in range(N)
    ]


def _refcoco_rows() -> list[dict[str, Any]]:
    rows = []
    for i, (x, y, w, h) in enumerate(BOXES):
        rows.append(
            {
                "question_id": str(100 + i),
                "image": photo(i, 64),
                "question": "Please carefully observe the area circled in the image and come up with a caption "
                "for the area.",
                "answer": EXPRESSIONS[i],
                "segmentation": [x, y, x + w, y, x + w, y + h, x, y + h],
                "bbox": [x, y, w, h],
                "iscrowd": 0,
                "file_name": f"COCO_train2014_{581857 + i:012d}.jpg",
            }
        )
    return rows


@dataclass(frozen=True)
class Case:
    """One task, its lmms-eval task folder, YAML file and process_results hook, and its fixture."""

    task: str
    lmms_dir: str
    lmms_yaml: str
    process_results: str
    features: datasets.Features
    rows: Callable[[], list[dict[str, Any]]]


CASES = [
    Case("flickr30k_test", "flickr30k", "flickr30k_test.yaml", "flickr_process_result", FLICKR_FEATURES, _flickr_rows),
    Case("coco2014_cap_val", "coco_cap", "coco2014_cap_val.yaml", "coco_process_result", COCO_FEATURES,
         lambda: _coco_rows(2014)),
    Case("coco2017_cap_val", "coco_cap", "coco2017_cap_val.yaml", "coco_process_result", COCO_FEATURES,
         lambda: _coco_rows(2017)),
    Case("nocaps_val", "nocaps", "nocaps_val.yaml", "nocaps_process_result", NOCAPS_FEATURES, _nocaps_rows),
    Case("textcaps_val", "textcaps", "textcaps_val.yaml", "textcaps_process_result", TEXTCAPS_FEATURES,
         _textcaps_rows),
    Case("refcoco_bbox_val", "refcoco", "refcoco_bbox_val.yaml", "refcoco_process_result", REFCOCO_FEATURES,
         _refcoco_rows),
    Case("refcoco+_bbox_val", "refcoco+", "refcoco+_bbox_val.yaml", "refcoco_process_result", REFCOCO_FEATURES,
         _refcoco_rows),
    Case("refcocog_bbox_val", "refcocog", "refcocog_bbox_val.yaml", "refcoco_process_result", REFCOCO_FEATURES,
         _refcoco_rows),
]  # fmt: skip
BY_TASK = {c.task: c for c in CASES}
LITE_YAML = {
    "flickr30k_test": "flickr30k_test_lite.yaml",
    "coco2017_cap_val": "coco2017_cap_val_lite.yaml",
    "nocaps_val": "nocaps_val_lite.yaml",
    "textcaps_val": "textcaps_val_lite.yaml",
    "refcoco_bbox_val": "refcoco_bbox_val_lite.yaml",
}


def lmms_metric_keys(case: Case) -> list[str]:
    """The result keys lmms-eval reports for the task (its metric_list names)."""
    return [m["metric"] for m in lmms_eval_yaml(case.lmms_dir, case.lmms_yaml)["metric_list"]]


def lmms_prompt(case: Case, doc: dict[str, Any], yaml_file: str | None = None) -> str:
    """lmms-eval's prompt text for `doc`; coco2014_cap_val writes it in its YAML instead of a hook."""
    data = lmms_eval_yaml(case.lmms_dir, yaml_file or case.lmms_yaml)
    if case.task == "coco2014_cap_val":
        return data["doc_to_text"]
    return lmms_eval_prompt(case.lmms_dir, yaml_file or case.lmms_yaml, doc)


def our_prompt(config: TaskConfig, row: dict[str, Any]) -> str:
    """Our prompt text for a fixture row, `<image>` markers removed (rendered without a run)."""
    fields = dict(row)
    if config.process_doc:
        fields |= DOC_PROCESSORS.get(config.process_doc)(fields)
    messages = render_messages(config.doc_to_messages, fields, None, config.task)
    return messages[-1].text.replace("<image>", "")


def saved_fixture(case: Case, data_dir: Path) -> list[str]:
    """Save the case's fixture where --data_dir finds it; returns its doc ids in order."""
    config = task_config(case.task)
    rows = case.rows()
    save_split(data_dir, config, rows, case.features)
    return [str(row[config.doc_id]) if config.doc_id else str(i) for i, row in enumerate(rows)]


def values(results: dict[str, Any], keys: list[str]) -> dict[str, float]:
    """The metric values under lmms-eval's keys."""
    return {k: results[f"{k},none"] for k in keys}


def refs_of(case: Case, row: dict[str, Any]) -> list[str]:
    """The row's reference captions (its task's target field)."""
    return row[task_config(case.task).target]


@pytest.mark.parametrize("case", CASES, ids=[c.task for c in CASES])
def test_a_caption_task_runs_end_to_end_like_lmms_eval(case: Case, tmp_path: Path, monkeypatch) -> None:
    data = tmp_path / "data"
    ids = saved_fixture(case, data)
    keys = lmms_metric_keys(case)
    rows = case.rows()
    reference = {d: refs_of(case, rows[i])[0] for i, d in enumerate(ids)}

    results, samples = run_task(tmp_path, data, case.task, reference, ids)
    assert [s["doc_id"] for s in samples] == ids
    best = values(results, keys)  # every lmms-eval key is there
    # A reference caption is the best possible answer for BLEU-1..4, METEOR and ROUGE-L (all 1);
    # CIDEr-D rewards consensus with all references (up to 10), so one reference copy is below its
    # ceiling, yet beats every other answer tried below.
    cider = keys[0].split("_")[0] + "_CIDEr"
    top_is_one = {k: v for k, v in best.items() if k != cider}
    assert top_is_one == dict.fromkeys(top_is_one, pytest.approx(1.0, abs=1e-6))
    assert 0 < best[cider] < 10

    # The prompt is lmms-eval's, image first; it is the same text for every doc, which differ by image.
    peer = lmms_eval_module(f"tasks.{case.lmms_dir}.utils")
    for sample, row in zip(samples, rows, strict=True):
        text = prompt_text(sample)
        assert not LEFTOVER.search(text) and text.startswith("<image>")
        assert text.replace("<image>", "") == lmms_prompt(case, row)
        # lmms-eval's process_results scores the same references, under the same keys
        scored = getattr(peer, case.process_results)(row, [reference[sample["doc_id"]]])
        assert sorted(scored) == sorted(keys)
        assert scored[keys[0]]["answer"] == sample["target"] and scored[keys[0]]["pred"] == sample["extracted"]
    monkeypatch.setenv(DATA_DIR_ENV, str(data))
    task = Task(task_config(case.task))
    first, second = (np.asarray(task.request(task.doc(ref), 0).messages[0].images[0]) for ref in task.doc_refs()[:2])
    assert first.shape != second.shape or not np.array_equal(first, second)

    # Another doc's reference shares a few words: every metric drops. A caption sharing no word
    # with the references scores each metric's minimum, 0.
    other, _ = run_task(tmp_path, data, case.task, {d: reference[ids[(i + 1) % N]] for i, d in enumerate(ids)}, ids)
    assert all(values(other, keys)[k] < best[k] for k in keys)
    wrong, _ = run_task(tmp_path, data, case.task, dict.fromkeys(ids, WRONG), ids)
    assert values(wrong, keys) == {k: pytest.approx(0.0, abs=1e-9) for k in keys}  # BLEU's smoothing: ~1e-15


def test_coco_scores_equal_lmms_evals_own_aggregation(tmp_path: Path) -> None:
    """lmms-eval's coco_aggregation_result (PTBTokenizer and pycocoevalcap, Java) on the same
    predictions gives our numbers; METEOR is left out here (the same jar, checked in
    test_caption_metrics) to start its Java process once per suite."""
    case = BY_TASK["coco2017_cap_val"]
    data = tmp_path / "data"
    ids = saved_fixture(case, data)
    rows = case.rows()
    answers = {d: CAPTIONS[(i + 1) % N][i] + " Close up." for i, d in enumerate(ids)}  # partly right, partly not
    results, _ = run_task(tmp_path, data, case.task, answers, ids)
    peer = lmms_eval_module("tasks.coco_cap.utils")
    items = [peer.coco_process_result(row, [answers[d]])["coco_CIDEr"] for row, d in zip(rows, ids, strict=True)]
    args = SimpleNamespace(output_path=str(tmp_path / "lmms_eval"))
    for key in ("CIDEr", "Bleu_4", "Bleu_1", "ROUGE_L"):
        assert results[f"coco_{key},none"] == pytest.approx(peer.coco_aggregation_result(items, key, args), abs=1e-9)


@pytest.mark.parametrize("lmms_dir", ["refcoco", "refcoco+", "refcocog"])
def test_the_region_box_is_drawn_as_lmms_eval_draws_it(lmms_dir: str, tmp_path: Path, monkeypatch) -> None:
    case = next(c for c in CASES if c.lmms_dir == lmms_dir)
    data = tmp_path / "data"
    saved_fixture(case, data)
    monkeypatch.setenv(DATA_DIR_ENV, str(data))
    task = Task(task_config(case.task))
    peer = lmms_eval_module(f"tasks.{lmms_dir}.utils")
    for ref in task.doc_refs():
        row = task.rows[ref.index]  # as the hub gives it: decoded image, float32 box
        (image,) = task.request(task.doc(ref), 0).messages[0].images
        expected = peer.refcoco_bbox_doc_to_visual(row)[0]
        assert image.mode == expected.mode == "RGB"
        assert np.array_equal(np.asarray(image), np.asarray(expected))
        assert not np.array_equal(np.asarray(image), np.asarray(row["image"].convert("RGB")))  # a box was drawn


def test_a_region_without_a_four_number_box_is_a_doc_error() -> None:
    with pytest.raises(DocError, match=r"field 'bbox' must hold 4 numbers \(x, y, width, height\), got \[1.0, 2.0\]"):
        DOC_PROCESSORS.get("refcoco_bbox")({"image": photo(0, 32), "bbox": [1.0, 2.0]})


@pytest.mark.parametrize("task", [c.task for c in CASES] + [f"{t}_lite" for t in LITE_YAML])
def test_the_protocol_is_lmms_evals(task: str) -> None:
    config = task_config(task)
    full = BY_TASK[task.removesuffix("_lite")]
    lmms = lmms_eval_yaml(full.lmms_dir, LITE_YAML[full.task] if task.endswith("_lite") else full.lmms_yaml)
    assert config.lmms_eval is not None and config.lmms_eval.task == lmms["task"] == task
    assert (config.dataset.path, config.dataset.name, config.split) == (
        lmms["dataset_path"], lmms.get("dataset_name"), lmms["test_split"]
    )  # fmt: skip
    generation = lmms["generation_kwargs"]
    # lmms-eval's `until` defaults to its few-shot delimiter; with no length set, its LLaVA
    # wrappers generate up to 1024 tokens, greedily
    assert config.generation.stop == tuple(generation.get("until", ["\n\n"]))
    assert config.generation.max_new_tokens == generation.get("max_new_tokens", 1024)
    assert (config.generation.temperature, config.generation.top_p) == (
        generation.get("temperature", 0), generation.get("top_p", 1.0)
    )  # fmt: skip
    assert sorted(config.metric_keys) == sorted(m["metric"] for m in lmms["metric_list"])
    assert config.metric_keys[0].endswith("_CIDEr")  # the headline


@pytest.mark.parametrize("task", list(LITE_YAML))
def test_a_lite_task_is_its_full_task_on_the_lite_subset(task: str) -> None:
    full, lite = task_config(task), task_config(f"{task}_lite")
    assert (lite.dataset.path, lite.dataset.name, lite.split, lite.docs) == (
        "lmms-lab-encoder/LMMs-Eval-Lite", task, "lite", 500
    )  # fmt: skip
    assert lite.group == ("lmms_eval_lite",)  # not in `caption`, which holds the full task
    same = {"task", "dataset", "split", "docs", "group", "description", "source_file"}
    assert replace(lite, **{k: getattr(full, k) for k in same}, lmms_eval=full.lmms_eval) == full
    assert lite.lmms_eval.differences == full.lmms_eval.differences
    case = BY_TASK[task]
    row = case.rows()[0]
    assert our_prompt(lite, row) == lmms_prompt(case, row, LITE_YAML[task]) == lmms_prompt(case, row)
    # lmms-eval's lite YAML is its full one but for where the data comes from
    data_keys = {"dataset_path", "dataset_name", "dataset_kwargs", "test_split", "task", "group", "include"}
    full_yaml, lite_yaml = (lmms_eval_yaml(case.lmms_dir, f) for f in (case.lmms_yaml, LITE_YAML[task]))
    assert {k: v for k, v in lite_yaml.items() if k not in data_keys} == {
        k: v for k, v in full_yaml.items() if k not in data_keys
    }


def test_the_parity_check_s_tokenizer_stand_in_gives_ptbtokenizer_s_tokens() -> None:
    """The parity check runs lmms-eval's scoring with PTBTokenizer once per distinct caption
    (fastmmeval.parity.setups): new, cached and empty captions get PTBTokenizer's tokens, and
    a caption that is two lines to Java sends the whole input to PTBTokenizer as it is."""
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    from fastmmeval.parity.setups import LinePTBTokenizer

    def captions(*images: list[str]) -> dict[int, list[dict[str, str]]]:
        return {i: [{"caption": t} for t in texts] for i, texts in enumerate(images)}

    ordinary = captions([CAPTIONS[0][0], ""], ["A cat on a <b>mat</b>.", "It's 5 o'clock.\nA clock.", WRONG])
    expected = PTBTokenizer().tokenize(ordinary)
    assert LinePTBTokenizer().tokenize(ordinary) == expected
    assert LinePTBTokenizer().tokenize(ordinary) == expected  # from the cache, no Java
    two_lines = captions([CAPTIONS[1][0]], ["A cat\ron a mat."])
    assert LinePTBTokenizer().tokenize(two_lines) == PTBTokenizer().tokenize(two_lines)
