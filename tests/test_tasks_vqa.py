"""The open-ended VQA benchmarks (gqa, vqav2_val, ok_vqa_val2014, vizwiz_vqa_val, textvqa_val and
their Lite subsets) run end to end on fixtures in their hub schema, with lmms-eval 0.7.3's prompt
and lmms-eval's score for every doc.

Hub schemas: VQAv2, OK-VQA, VizWiz-VQA and textvqa from the lmms-lab dataset cards (lmms-eval
0.7.3 reads the lmms-lab-encoder copies of them). GQA's testdev_balanced_instructions columns
are from its card and lmms-eval's utils (which reads `question`, `answer` and `imageId`); the
exact nesting of its `annotations` and `semantic` columns is our assumption (nothing reads them).
The Lite configs are assumed to hold the same columns as the full datasets they subsample."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import datasets
import pytest
from peer_lmms_eval import lmms_eval_module
from task_fixtures import (
    assert_renders,
    lmms_eval_prompt,
    lmms_eval_yaml,
    photo,
    prompt_text,
    run_task,
    save_split,
    task_config,
)

from fastmmeval.errors import ConfigError, DocError
from fastmmeval.tasks.catalog import Catalog
from fastmmeval.tasks.families.vqa import GQA_IMAGES, GQA_IMAGES_SPLIT, exact_match_ignore_punct
from fastmmeval.tasks.processors import PROCESSOR_DATA
from fastmmeval.tasks.sources import DATA_DIR_ENV, saved_split_dir
from fastmmeval.tasks.task import DocRef, Task

STR = datasets.Value("string")
STRS = datasets.Sequence(STR)
OBJECT_REFS = [{"objectId": STR, "value": STR}]
GQA_FEATURES = datasets.Features({
    "id": STR, "imageId": STR, "question": STR, "answer": STR, "fullAnswer": STR, "isBalanced": datasets.Value("bool"),
    "groups": {"global": STR, "local": STR}, "entailed": STR, "equivalent": STR,
    "types": {"structural": STR, "semantic": STR, "detailed": STR},
    "annotations": {"answer": OBJECT_REFS, "question": OBJECT_REFS, "fullAnswer": OBJECT_REFS},
    "semantic": [{"operation": STR, "argument": STR, "dependencies": datasets.Sequence(datasets.Value("int32"))}],
    "semanticStr": STR,
})  # fmt: skip
GQA_IMAGE_FEATURES = datasets.Features({"id": STR, "image": datasets.Image()})
VQAV2_FEATURES = datasets.Features({
    "question_type": STR, "multiple_choice_answer": STR,
    "answers": [{"answer": STR, "answer_confidence": STR, "answer_id": datasets.Value("int64")}],
    "image_id": datasets.Value("int64"), "answer_type": STR, "question_id": datasets.Value("int64"), "question": STR,
    "image": datasets.Image(),
})  # fmt: skip
OK_VQA_FEATURES = datasets.Features({"question_id": STR, "image": datasets.Image(), "question": STR, "answers": STRS,
                                     "question_type": STR, "answer_type": STR})  # fmt: skip
VIZWIZ_FEATURES = datasets.Features({"question_id": STR, "image": datasets.Image(), "question": STR, "answers": STRS,
                                     "category": STR})  # fmt: skip
TEXTVQA_FEATURES = datasets.Features({
    "image_id": STR, "question_id": datasets.Value("int32"), "question": STR, "question_tokens": STRS,
    "image": datasets.Image(), "image_width": datasets.Value("int32"), "image_height": datasets.Value("int32"),
    "flickr_original_url": STR, "flickr_300k_url": STR, "answers": STRS, "image_classes": STRS, "set_name": STR,
    "ocr_tokens": STRS,
})  # fmt: skip


def gqa_row(qid: str, image_id: str, question: str, answer: str) -> dict[str, Any]:
    return {
        "id": qid, "imageId": image_id, "question": question, "answer": answer, "fullAnswer": f"It is {answer}.",
        "isBalanced": True, "groups": {"global": "", "local": ""}, "entailed": "[]", "equivalent": f"['{qid}']",
        "types": {"structural": "query", "semantic": "attr", "detailed": "attr"},
        "annotations": {"answer": [], "question": [{"objectId": "1", "value": "2"}], "fullAnswer": []},
        "semantic": [{"operation": "select", "argument": "thing (1)", "dependencies": []}],
        "semanticStr": "select: thing (1)",
    }  # fmt: skip


def vqav2_row(qid: int, question: str, answers: list[str], image: int) -> dict[str, Any]:
    return {
        "question_type": "what", "multiple_choice_answer": answers[0],
        "answers": [{"answer": a, "answer_confidence": "yes", "answer_id": i + 1} for i, a in enumerate(answers)],
        "image_id": 1000 + image, "answer_type": "other", "question_id": qid, "question": question,
        "image": photo(image),
    }  # fmt: skip


def ok_vqa_row(qid: str, question: str, answers: list[str], image: int) -> dict[str, Any]:
    return {"question_id": qid, "image": photo(image), "question": question, "answers": answers,
            "question_type": "other", "answer_type": "other"}  # fmt: skip


def vizwiz_row(qid: str, question: str, answers: list[str], image: int) -> dict[str, Any]:
    category = "unanswerable" if answers.count("unanswerable") > 5 else "other"
    return {"question_id": qid, "image": photo(image), "question": question, "answers": answers, "category": category}


def textvqa_row(qid: int, question: str, answers: list[str], ocr: list[str], image: int) -> dict[str, Any]:
    return {
        "image_id": f"img{image}", "question_id": qid, "question": question, "question_tokens": question.split(),
        "image": photo(image), "image_width": 96, "image_height": 72, "flickr_original_url": "", "flickr_300k_url": "",
        "answers": answers, "image_classes": ["Camera"], "set_name": "val", "ocr_tokens": ocr,
    }  # fmt: skip


@dataclass(frozen=True)
class Bench:
    """One benchmark's fixture: rows in its hub schema, then per doc id an answer the references
    accept (in a surface form its normalization must forgive) and one they reject."""

    task: str
    lmms_dir: str
    features: datasets.Features
    rows: Callable[[], list[dict[str, Any]]]
    id_field: str
    right: dict[str, str]
    wrong: dict[str, str]


GQA = Bench(
    "gqa", "gqa", GQA_FEATURES,
    lambda: [gqa_row("201307251", "n161313", "Is it overcast?", "no"),
             gqa_row("20515378", "n235859", "What is the man wearing?", "t-shirt"),
             gqa_row("20515379", "n235859", "Which side is the cup on?", "left"),
             gqa_row("1234567", "n99", "What color is the car?", "white")],
    "id",
    {"201307251": "No.", "20515378": "T-Shirt", "20515379": "left"},
    {"1234567": "black"},
)  # fmt: skip
VQAV2 = Bench(
    "vqav2_val", "vqav2", VQAV2_FEATURES,
    lambda: [vqav2_row(1, "What color is the cat?", ["orange"] * 7 + ["brown"] * 2 + ["red"], 1),
             vqav2_row(2, "How many cups are there?", ["2"] * 3 + ["two"] * 4 + ["Two"] + ["3"] * 2, 2),
             vqav2_row(3, "Is this a rocket?", ["yes"] * 10, 3),
             vqav2_row(4, "What is the person riding?", ["motorcycle"] * 6 + ["a motorbike"] * 4, 4)],
    "question_id",
    {"1": "Orange.", "2": "Two", "3": "Yes"},
    {"4": "a horse"},
)  # fmt: skip
OK_VQA = Bench(
    "ok_vqa_val2014", "ok_vqa", OK_VQA_FEATURES,
    lambda: [ok_vqa_row("5769", "What sport can you use this for?", ["racing"] * 6 + ["motocross"] * 4, 4),
             ok_vqa_row("2978", "What is the drink made from?", ["coffee bean"] * 8 + ["beans"] * 2, 2),
             ok_vqa_row("3310", "Which planet does this fly from?", ["earth"] * 10, 3)],
    "question_id",
    {"5769": "Racing", "2978": "Coffee Bean."},
    {"3310": "mars"},
)  # fmt: skip
VIZWIZ = Bench(
    "vizwiz_vqa_val", "vizwiz_vqa", VIZWIZ_FEATURES,
    lambda: [vizwiz_row("VizWiz_val_00000000", "what is this?", ["cat"] * 9 + ["kitten"], 1),
             vizwiz_row("VizWiz_val_00000001", "What does this SAY?", ["unanswerable"] * 10, 9),
             vizwiz_row("VizWiz_val_00000002", "is there coffee in this cup?", ["yes"] * 7 + ["no"] * 3, 2)],
    "question_id",
    {"VizWiz_val_00000000": "A cat.", "VizWiz_val_00000001": "Unanswerable"},
    {"VizWiz_val_00000002": "tea"},
)  # fmt: skip
TEXTVQA = Bench(
    "textvqa_val", "textvqa", TEXTVQA_FEATURES,
    lambda: [textvqa_row(34602, "what brand is this camera?", ["nikon"] * 8 + ["nikon d90"] * 2, ["NIKON", "D90"], 9),
             textvqa_row(34603, "What does the page SAY at the top?", ["scikit-image"] * 10, ["scikit-image"], 7),
             textvqa_row(34604, "what number is on the rocket?", ["12"] * 4 + ["twelve"] * 6, ["12"], 3)],
    "question_id",
    {"34602": "Nikon", "34603": "Scikit-Image"},
    {"34604": "7"},
)  # fmt: skip
BENCHES = [GQA, VQAV2, OK_VQA, VIZWIZ, TEXTVQA]


def save_fixture(bench: Bench, data_dir: Path, task: str | None = None) -> list[dict[str, Any]]:
    """Save the bench's rows as the split `task` (default: the bench's own task) reads, plus GQA's
    image config for GQA; returns the rows."""
    rows = bench.rows()
    save_split(data_dir, task_config(task or bench.task), rows, bench.features)
    if bench is GQA:
        images = [{"id": image_id, "image": photo(i)} for i, image_id in enumerate(["n161313", "n235859", "n99", "n5"])]
        out = saved_split_dir(data_dir, GQA_IMAGES, GQA_IMAGES_SPLIT)
        datasets.Dataset.from_list(images, features=GQA_IMAGE_FEATURES).save_to_disk(str(out))
    return rows


def lmms_eval_score(bench: Bench, doc: dict[str, Any], prediction: str) -> float:
    """lmms-eval 0.7.3's exact_match for one doc: its process_results hook, or for GQA (which has
    none) its exact_match metric with the task's ignore_case and ignore_punctuation."""
    if bench is GQA:
        metric = lmms_eval_module("api.metrics").exact_match_hf_evaluate
        return float(metric(predictions=[prediction.strip()], references=[doc["answer"]], ignore_case=True,
                            ignore_punctuation=True)["exact_match"])  # fmt: skip
    yaml = lmms_eval_yaml(bench.lmms_dir, f"{bench.task}.yaml")
    hook = getattr(lmms_eval_module(f"tasks.{bench.lmms_dir}.utils"), yaml["process_results"].rsplit(".", 1)[1])
    return hook(copy.deepcopy(doc), [prediction.strip()])["exact_match"]  # it rewrites doc["answers"]


@pytest.mark.parametrize("bench", BENCHES, ids=lambda b: b.task)
def test_a_vqa_task_runs_with_lmms_eval_prompt_and_score(bench: Bench, tmp_path: Path) -> None:
    rows = save_fixture(bench, tmp_path / "data")
    answers = {**bench.right, **bench.wrong}
    results, samples = run_task(tmp_path, tmp_path / "data", bench.task, answers, list(answers))
    assert [s["doc_id"] for s in samples] == [str(r[bench.id_field]) for r in rows]
    assert [s.get("failed") for s in samples] == [None] * len(samples)
    assert_renders(samples)
    by_id = {str(r[bench.id_field]): r for r in rows}
    for s in samples:
        doc, answer = by_id[s["doc_id"]], answers[s["doc_id"]]
        assert prompt_text(s).replace("<image>", "") == lmms_eval_prompt(bench.lmms_dir, f"{bench.task}.yaml", doc)
        assert s["metrics"]["exact_match"] == (1.0 if s["doc_id"] in bench.right else 0.0), (s["doc_id"], answer)
        assert s["metrics"]["exact_match"] == pytest.approx(lmms_eval_score(bench, doc, answer), abs=1e-12)
    assert results["exact_match,none"] == pytest.approx(len(bench.right) / len(answers))
    reported = {m["metric"] for m in lmms_eval_yaml(bench.lmms_dir, f"{bench.task}.yaml")["metric_list"]}
    assert reported - {"submission"} == {"exact_match"}  # lmms-eval's prediction file for answer servers is not ours


def test_prompts_follow_lmms_eval_capitalization_and_leave_out_ocr_tokens(tmp_path: Path, monkeypatch) -> None:
    """TextVQA and VizWiz print the question through str.capitalize (the rest lower-cased), OK-VQA
    as stored; lmms-eval's default TextVQA prompt has no OCR tokens (`ocr: false`)."""
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    texts = {}
    for bench in (TEXTVQA, VIZWIZ, OK_VQA):
        save_fixture(bench, tmp_path)
        task = Task(task_config(bench.task))
        texts[bench.task] = task.request(task.doc(DocRef(1, "x")), seed=0).messages[0].text
    assert texts["textvqa_val"].startswith("<image>What does the page say at the top?\n")
    assert texts["vizwiz_vqa_val"].startswith("<image>What does this say?\n")
    assert texts["ok_vqa_val2014"].startswith("<image>What is the drink made from?\n")
    assert "OCR" not in texts["textvqa_val"] and "scikit-image" not in texts["textvqa_val"]


def test_gqa_finds_each_image_by_its_id_in_the_image_config(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    save_fixture(GQA, tmp_path)
    task = Task(task_config("gqa"))
    refs = task.doc_refs()
    images = [task.doc(r).fields["image"].convert("RGB").tobytes() for r in refs]
    assert images == [photo(i).tobytes() for i in (0, 1, 1, 2)]  # imageIds n161313, n235859 (twice), n99
    orphan = {**GQA.rows()[0], "imageId": "n404"}
    with pytest.raises(DocError, match=r"imageId 'n404' is not in lmms-lab-encoder/GQA testdev_balanced_images"):
        task.process(orphan)


def test_gqa_without_its_image_config_fails_naming_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    save_split(tmp_path, task_config("gqa"), GQA.rows(), GQA.features)
    task = Task(task_config("gqa"))
    with pytest.raises(ConfigError, match=r"GQA.s images .*testdev_balanced_images.*expected at .*GQA.*--download gqa"):
        task.doc(task.doc_refs()[0])


def test_vqav2_answers_are_normalized_as_lmms_eval_normalizes_them() -> None:
    """The target is the annotator answers as lmms-eval compares them ("Two" and "two" are "2",
    "a motorbike" is "motorbike"), so vqa_accuracy needs no further normalization of them."""
    task = Task(task_config("vqav2_val"))
    rows = VQAV2.rows()
    assert task.process(rows[1])["normalized_answers"] == ["2"] * 8 + ["3"] * 2
    assert task.process(rows[3])["normalized_answers"] == ["motorcycle"] * 6 + ["motorbike"] * 4


FULL_TASKS = [b.task for b in BENCHES]


def test_the_vqa_group_holds_every_full_task_and_textvqa_is_also_a_doc_task() -> None:
    groups = Catalog().groups
    assert set(groups["vqa"]) == set(FULL_TASKS)  # the lite tasks are in lmms_eval_lite only
    assert "textvqa_val" in groups["doc"] and {f"{t}_lite" for t in FULL_TASKS} <= set(groups["lmms_eval_lite"])


@pytest.mark.parametrize("task", FULL_TASKS + [f"{t}_lite" for t in FULL_TASKS])
def test_data_and_generation_settings_are_lmms_eval_s(task: str) -> None:
    bench = next(b for b in BENCHES if task.startswith(b.task))
    yaml = lmms_eval_yaml(bench.lmms_dir, f"{task}.yaml")
    config = task_config(task)
    assert (config.dataset.path, config.dataset.name, config.split) == (
        yaml["dataset_path"], yaml.get("dataset_name"), yaml["test_split"])  # fmt: skip
    kwargs = yaml["generation_kwargs"]
    assert list(config.generation.stop) == kwargs.get("until", ["\n\n"])  # "\n\n": lmms-eval's default `until`
    assert config.generation.max_new_tokens == kwargs.get("max_new_tokens", 1024)  # 1024: its models' default
    assert config.generation.temperature == kwargs.get("temperature", 0)
    assert config.lmms_eval is not None and config.lmms_eval.task == task


@pytest.mark.parametrize("bench", BENCHES, ids=lambda b: b.task)
def test_a_lite_task_is_its_full_task_on_lmms_eval_lite_data(bench: Bench) -> None:
    full, lite = task_config(bench.task), task_config(f"{bench.task}_lite")
    assert lite.group == ("lmms_eval_lite",) and lite.docs == 500
    assert (lite.dataset.path, lite.dataset.name, lite.split) == ("lmms-lab-encoder/LMMs-Eval-Lite", bench.task, "lite")
    differ = {"task", "dataset", "split", "docs", "group", "description", "source_file", "lmms_eval"}
    protocol = [f.name for f in fields(full) if f.name not in differ]
    assert {n: getattr(lite, n) for n in protocol} == {n: getattr(full, n) for n in protocol}
    assert lite.lmms_eval is not None and full.lmms_eval is not None
    differences = [d.replace("gqa_lite", "gqa") for d in lite.lmms_eval.differences.values()]
    assert differences == list(full.lmms_eval.differences.values())
    doc = bench.rows()[0]
    assert lmms_eval_prompt(bench.lmms_dir, f"{bench.task}_lite.yaml", doc) == lmms_eval_prompt(
        bench.lmms_dir, f"{bench.task}.yaml", doc)  # fmt: skip


def test_gqa_lite_runs_with_images_from_gqa_s_image_config(tmp_path: Path) -> None:
    save_fixture(GQA, tmp_path / "data", task="gqa_lite")
    answers = {**GQA.right, **GQA.wrong}
    results, samples = run_task(tmp_path, tmp_path / "data", "gqa_lite", answers, list(answers))
    assert [s.get("failed") for s in samples] == [None] * len(samples)
    assert results["exact_match,none"] == pytest.approx(3 / 4)


def test_gqa_exact_match_equals_lmms_eval_s_with_case_and_punctuation_ignored() -> None:
    metric = lmms_eval_module("api.metrics").exact_match_hf_evaluate
    rng = random.Random(0)
    pieces = ["yes", "Yes", "no", "t-shirt", "tshirt", "T shirt", "left", "Left.", " ", "  ", "!", "'", "é", "É",
              "ß", "İ", "(", ")", "-", "_", "1", "1.5", "\t", "coffee", "café"]  # fmt: skip
    agree = 0
    for _ in range(3000):
        prediction = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 3)))
        reference = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 3)))
        ours = exact_match_ignore_punct(prediction, [reference])
        peer = metric(predictions=[prediction], references=[reference], ignore_case=True, ignore_punctuation=True)
        if "İ" in prediction + reference:  # numpy cuts "İ".lower() == "i̇" to the array's width
            continue
        assert ours == peer["exact_match"], (prediction, reference)
        agree += ours == 1.0
    assert agree > 50  # matches occur, not only mismatches
    assert exact_match_ignore_punct("İ", ["i̇"]) == 1.0
    assert metric(predictions=["İ"], references=["i̇"], ignore_case=True, ignore_punctuation=True)["exact_match"] == 0
    assert exact_match_ignore_punct("T-Shirt.", ["tshirt"]) == 1.0 and exact_match_ignore_punct(None, ["no"]) == 0.0


def test_gqa_s_fingerprint_names_its_image_config_too(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    save_split(tmp_path, task_config("gqa"), GQA.rows(), GQA.features)
    before = Task(task_config("gqa")).fingerprint()
    assert Task(task_config("gqa")).fingerprint() == before
    moved = [(replace(GQA_IMAGES, name="other_images"), GQA_IMAGES_SPLIT)]
    monkeypatch.setitem(PROCESSOR_DATA, "gqa", moved)
    assert Task(task_config("gqa")).fingerprint() != before
