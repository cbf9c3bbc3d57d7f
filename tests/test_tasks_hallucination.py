"""The hallucination family (MME, POPE and its three samplings, HallusionBench) run by name on
fixtures in their hub schemas, with lmms-eval 0.7.3's prompts, result keys and scoring.

Hub schemas (the dataset cards were not available offline; columns are the ones lmms-eval's
utils read plus the rest of each card as remembered, all strings except the image):
lmms-lab-encoder/MME (question_id, image, question, answer, category; question_id is the image
path, shared by the two questions of an image); lmms-lab-encoder/POPE, default config and config
Full (id, question_id, question, answer, image_source, image, category); lmms-lab-encoder/
HallusionBench (category, subcategory, visual_input, set_id, figure_id, sample_note, question_id,
question, gt_answer_details, gt_answer, filename, image; gt_answer is "1" yes / "0" no)."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import datasets
import pytest
from peer_lmms_eval import lmms_eval_module
from task_fixtures import (
    assert_renders,
    judge_queries,
    lmms_eval_prompt,
    lmms_eval_yaml,
    photo,
    prompt_text,
    run_task,
    save_split,
    task_config,
)

from fastmmeval.extract import EXTRACTORS
from fastmmeval.metrics import METRICS
from fastmmeval.tasks.families.hallusion_bench import hallusion_verdict

S, IMAGE = datasets.Value("string"), datasets.Image()
MME = datasets.Features({"question_id": S, "image": IMAGE, "question": S, "answer": S, "category": S})
POPE = datasets.Features({"id": S, "question_id": S, "question": S, "answer": S, "image_source": S, "image": IMAGE,
                          "category": S})  # fmt: skip
HALLUSION = datasets.Features({name: S for name in (
    "category", "subcategory", "visual_input", "set_id", "figure_id", "sample_note", "question_id", "question",
    "gt_answer_details", "gt_answer", "filename")} | {"image": IMAGE})  # fmt: skip

# (question_id = image path, question, answer, category): two questions per image, as MME has.
MME_DOCS = [
    ("existence/000000006040.jpg", "Is there a train in this image? Please answer yes or no.", "Yes", "existence"),
    ("existence/000000006040.jpg", "Is there a bed in this image? Please answer yes or no.", "No", "existence"),
    ("count/000000067213.jpg", " Are there two dogs in the image? Please answer yes or no.\n", "No", "count"),
    ("count/000000067213.jpg", "Is there only one dog in the image? Please answer yes or no.", "Yes", "count"),
    ("code_reasoning/0020.png", "Is a c++ code shown in the picture? Please answer yes or no.", "Yes",
     "code_reasoning"),
    ("code_reasoning/0020.png", "Is a python code shown in the picture? Please answer yes or no.", "No",
     "code_reasoning"),
]  # fmt: skip
# (question, answer, category)
POPE_DOCS = [
    ("Is there a snowboard in the image?", "yes", "adversarial"),
    ("Is there a car in the image?", "no", "adversarial"),
    (" Is there a person in the image? ", "yes", "popular"),
    ("Is there a dining table in the image?", "no", "popular"),
    ("Is there a bird in the image?", "no", "random"),
    ("Is there a skis in the image?", "yes", "random"),
]
POPE_METRICS = ("accuracy", "precision", "recall", "f1_score")  # lmms-eval's first four POPE keys, pope_<name>
# (category, subcategory, set_id, figure_id, question_id, gt_answer): a VD set asked of the original
# figure (0) and an edited one (1), and a VS set on two figures.
HALLUSION_DOCS = [
    ("VD", "illusion", "0", "0", "0", "1"), ("VD", "illusion", "0", "0", "1", "0"),
    ("VD", "illusion", "0", "1", "0", "0"), ("VD", "illusion", "0", "1", "1", "1"),
    ("VS", "chart", "3", "1", "0", "1"), ("VS", "chart", "3", "2", "0", "0"),
]  # fmt: skip


def mme_rows() -> list[dict[str, Any]]:
    return [{"question_id": qid, "image": photo(i // 2, 48), "question": q, "answer": a, "category": c}
            for i, (qid, q, a, c) in enumerate(MME_DOCS)]  # fmt: skip


def pope_rows(docs: list[tuple[str, str, str]] = POPE_DOCS) -> list[dict[str, Any]]:
    return [{"id": str(i), "question_id": str(i + 1), "question": q, "answer": a,
             "image_source": f"COCO_val2014_{i:012d}", "image": photo(i, 48), "category": c}
            for i, (q, a, c) in enumerate(docs)]  # fmt: skip


def hallusion_rows() -> list[dict[str, Any]]:
    return [
        {"category": c, "subcategory": sub, "visual_input": "1" if fig in ("0", "1") else "2", "set_id": s,
         "figure_id": fig, "sample_note": sub, "question_id": q,
         "question": f"According to figure {fig} of set {s}, is statement {q} of the {sub} true?",
         "gt_answer_details": f"Statement {q} is {'true' if gt == '1' else 'false'}.", "gt_answer": gt,
         "filename": f"./{c}/{sub}/{s}_{fig}.png", "image": photo(int(fig) + int(s), 48)}
        for c, sub, s, fig, q, gt in HALLUSION_DOCS
    ]  # fmt: skip


def yes_no(label: str, right: bool) -> str:
    """A short answer: the label's word when `right`, the other word otherwise."""
    return "Yes" if (label.lower() in ("yes", "1")) == right else "No"


def values(results: dict[str, Any]) -> dict[str, float]:
    """The metric values of a task's results, by lmms-eval-style key (without ',none')."""
    return {k.removesuffix(",none"): v for k, v in results.items() if k.endswith(",none") and "stderr" not in k}


def judge_args(tmp_path: Path, task: str) -> list[str]:
    """`--judge_config` flags for tests/judge_fixtures.py's scripted judge, for the task that needs
    a judge (HallusionBench)."""
    if task != "hallusion_bench_image":
        return []
    config = tmp_path / "judges.json"
    config.write_text(json.dumps({"judges": [{"name": "judge", "model": "scripted_judge"}]}))
    return ["--judge_config", str(config)]


def run_both(tmp_path: Path, data: Path, task: str, right: list[str], wrong: list[str]) -> tuple[dict, dict, list]:
    """(values for the right answers, values for the wrong answers, the right run's samples)."""
    ids = [str(i) for i in range(len(right))]
    best, samples = run_task(tmp_path, data, task, dict(zip(ids, right, strict=True)), ids, *judge_args(tmp_path, task))
    worst, _ = run_task(tmp_path, data, task, dict(zip(ids, wrong, strict=True)), ids, *judge_args(tmp_path, task))
    return values(best), values(worst), samples


# task: (lmms-eval task folder, its YAML, the fixture rows)
FAMILY = {
    "mme": ("mme", "mme.yaml", mme_rows),
    "pope": ("pope", "pope.yaml", pope_rows),
    "pope_adv": ("pope", "pope_adv.yaml", pope_rows),
    "pope_pop": ("pope", "pope_pop.yaml", pope_rows),
    "pope_random": ("pope", "pope_random.yaml", pope_rows),
    "hallusion_bench_image": ("hallusion_bench", "hallusion_bench_image.yaml", hallusion_rows),
}


@pytest.mark.parametrize("task", list(FAMILY))
def test_a_task_reads_lmms_eval_data_prompt_and_generation_settings(task: str) -> None:
    folder, yaml_file, rows = FAMILY[task]
    config, reference = task_config(task), lmms_eval_yaml(folder, yaml_file)
    assert (config.dataset.path, config.dataset.name, config.split) == (
        reference["dataset_path"],
        reference.get("dataset_name"),
        reference["test_split"].strip(),
    )
    kwargs = reference["generation_kwargs"]
    assert (config.generation.max_new_tokens, config.generation.temperature) == (kwargs["max_new_tokens"], 0)
    assert "until" not in kwargs and config.generation.stop == ()  # its default "\n\n", which its chat models ignore
    assert any("No stop string" in n for n in config.lmms_eval.notes)
    assert config.lmms_eval is not None and config.lmms_eval.task == task and config.lmms_eval.differences
    assert config.group == ("hallucination",)
    if kwargs["top_p"] == 0:  # inert under greedy decoding: a note
        assert config.generation.top_p == 1.0 and any("top_p" in n for n in config.lmms_eval.notes)


def lmms_eval_keys(task: str) -> list[str]:
    """The result keys lmms-eval reports for the task (its metric_list names), in its order."""
    folder, yaml_file, _ = FAMILY[task]
    return [m["metric"] for m in lmms_eval_yaml(folder, yaml_file)["metric_list"]]


def test_the_pope_samplings_are_pope_on_lmms_eval_full_splits() -> None:
    pope = task_config("pope")
    for task, split in (("pope_adv", "adversarial"), ("pope_pop", "popular"), ("pope_random", "random")):
        ours = task_config(task)
        assert (ours.dataset.name, ours.split, ours.docs) == ("Full", split, 3000)
        assert replace(ours, task="pope", dataset=pope.dataset, split="test", docs=9000, description=pope.description,
                       lmms_eval=pope.lmms_eval, source_file=pope.source_file) == pope  # fmt: skip
        assert ours.lmms_eval.differences == pope.lmms_eval.differences
        assert ours.lmms_eval.notes[:-1] == pope.lmms_eval.notes


def test_prompts_equal_lmms_eval(tmp_path: Path) -> None:
    for task, (folder, yaml_file, rows) in FAMILY.items():
        config, data = task_config(task), tmp_path / task
        save_split(data, config, rows(), {"mme": MME, "hallusion_bench_image": HALLUSION}.get(task, POPE))
        ids = [str(i) for i in range(len(rows()))]
        _, samples = run_task(tmp_path, data, task, dict.fromkeys(ids, "yes"), ids, "--limit", "3",
                              *judge_args(tmp_path, task))  # fmt: skip
        assert_renders(samples)
        for sample, row in zip(samples, rows(), strict=False):
            assert prompt_text(sample).replace("<image>", "") == lmms_eval_prompt(folder, yaml_file, row), task


def test_mme_scores_as_lmms_eval(tmp_path: Path) -> None:
    config, data = task_config("mme"), tmp_path / "data"
    save_split(data, config, mme_rows(), MME)
    answers = [d[2] for d in MME_DOCS]
    best, worst, samples = run_both(tmp_path, data, "mme", answers, [yes_no(a, False) for a in answers])
    assert set(lmms_eval_keys("mme")) <= set(best)
    assert (best["mme_perception_score"], best["mme_cognition_score"]) == (400.0, 200.0)  # 2 subtasks x 200, 1 x 200
    assert (worst["mme_perception_score"], worst["mme_cognition_score"]) == (0.0, 0.0)
    assert best["mme_existence_acc"] == best["mme_existence_acc_plus"] == 100.0

    # Free answers as lmms-eval reads them ("y", periods dropped): the same totals as its own aggregation.
    peer = lmms_eval_module("tasks.mme.utils")
    mixed = ["yes.", "Yes, there is a bed.", "n", "y", "The code is C++.", "NO."]
    ids = [str(i) for i in range(len(mixed))]
    ours, _ = run_task(tmp_path, data, "mme", dict(zip(ids, mixed, strict=True)), ids)
    theirs: dict[str, list[dict]] = {"mme_perception_score": [], "mme_cognition_score": []}
    for row, answer in zip(mme_rows(), mixed, strict=True):
        for key, item in peer.mme_process_results(row, [answer]).items():
            theirs[key].append(item)
    for key, items in theirs.items():
        assert values(ours)[key] == pytest.approx(peer.mme_aggregate_results(items)), key
    assert values(ours)["mme_perception_score"] == pytest.approx(50 + 200)  # existence: 1 of 2 right; count: both


def test_pope_scores_as_lmms_eval(tmp_path: Path) -> None:
    keys = lmms_eval_keys("pope")
    for task, rows in (("pope", pope_rows()), ("pope_adv", pope_rows(POPE_DOCS[:2]))):
        config, data = task_config(task), tmp_path / task
        save_split(data, config, rows, POPE)
        labels = [r["answer"] for r in rows]
        best, worst, samples = run_both(tmp_path, data, task, [yes_no(a, True).lower() for a in labels],
                                        [yes_no(a, False) for a in labels])  # fmt: skip
        assert set(lmms_eval_keys(task)) <= set(best) and keys[:4] == [f"pope_{k}" for k in POPE_METRICS]
        assert {k: best[k] for k in keys[:4]} == dict.fromkeys(keys[:4], 1.0)
        assert {k: worst[k] for k in keys[:4]} == dict.fromkeys(keys[:4], 0.0)
        share_yes = labels.count("yes") / len(labels)
        assert (best["pope_yes_ratio"], worst["pope_yes_ratio"]) == (share_yes, 1 - share_yes)  # the model's answers

    # Against lmms-eval's own functions: answers other than a bare yes/no are wrong in both; they differ
    # only in recall (lmms-eval drops them from its denominator) and in the yes ratio (lmms-eval: labels).
    peer = lmms_eval_module("tasks.pope.utils")
    mixed = ["Yes", "no ", "Yes.", "No", "yes", "No, there is none."]
    ids = [str(i) for i in range(len(mixed))]
    ours = values(run_task(tmp_path, tmp_path / "pope", "pope", dict(zip(ids, mixed, strict=True)), ids)[0])
    rows = zip(pope_rows(), mixed, strict=True)
    items = [peer.pope_process_results(row, [answer])["pope_accuracy"] for row, answer in rows]
    theirs = {k: getattr(peer, f"pope_aggregate_{k.removeprefix('pope_')}")(items) for k in keys}
    assert {k: ours[k] for k in keys[:2]} == pytest.approx({k: theirs[k] for k in keys[:2]})
    # "Yes." and "No, there is none." on yes labels: misses here, left out of lmms-eval's recall.
    assert (ours["pope_recall"], theirs["pope_recall"]) == (pytest.approx(1 / 3), 1.0)
    assert (ours["pope_yes_ratio"], theirs["pope_yes_ratio"]) == (pytest.approx(2 / 6), 0.5)


def test_hallusion_bench_scores_from_figures_and_question_pairs(tmp_path: Path) -> None:
    config, data = task_config("hallusion_bench_image"), tmp_path / "data"
    save_split(data, config, hallusion_rows(), HALLUSION)
    labels = [d[5] for d in HALLUSION_DOCS]
    right = [f"{yes_no(g, True)}, according to the figure." for g in labels]
    best, worst, samples = run_both(tmp_path, data, "hallusion_bench_image", right, [yes_no(g, False) for g in labels])
    assert set(lmms_eval_keys("hallusion_bench_image")) == set(best)
    assert best == {"aAcc": 100.0, "fAcc": 100.0, "qAcc": 100.0} and worst == {"aAcc": 0.0, "fAcc": 0.0, "qAcc": 0.0}
    assert [s["extracted"] for s in samples] == ["yes", "no", "no", "yes", "yes", "no"]

    # One wrong answer on the edited VD figure: 5/6 questions, 3/4 figures, 2/3 questions on all their figures.
    one_wrong = [*right[:3], "No.", *right[4:]]
    ids = [str(i) for i in range(6)]
    answers = dict(zip(ids, one_wrong, strict=True))
    task = "hallusion_bench_image"
    ours = values(run_task(tmp_path, data, task, answers, ids, *judge_args(tmp_path, task))[0])
    assert ours == pytest.approx({"aAcc": 500 / 6, "fAcc": 75.0, "qAcc": 200 / 3})


def lmms_eval_hallusion(items: list[dict[str, Any]], verdicts: list[int], tmp_path: Path) -> dict[str, float]:
    """lmms-eval's aAcc, fAcc, qAcc for docs whose judge verdicts are given (its GPT-4 call stubbed)."""
    module = lmms_eval_module("tasks.hallusion_bench.evaluate_hb")
    by_id = {id(r): str(v) for r, v in zip(items, verdicts, strict=True)}

    def judged(data, output_entry, correctness_entry, **_):
        for sample in data:
            sample[correctness_entry] = by_id[sample["_ref"]]
        return data

    results = []
    for row in items:
        result = module.hb_process_results(row, ["(unused)"])["aAcc"]
        results.append({**result, "_ref": id(row)})
    args = SimpleNamespace(output_path=str(tmp_path))
    original = module.evaluate_by_chatgpt
    module.evaluate_by_chatgpt = judged
    try:
        return {m: module.hb_aggregation_result([dict(r) for r in results], m, args) for m in ("aAcc", "fAcc", "qAcc")}
    finally:
        module.evaluate_by_chatgpt = original


def test_hallusion_bench_aggregates_equal_lmms_eval_on_random_verdicts(tmp_path: Path) -> None:
    """Random benchmarks (VD and VS sets, figures 0-2, question pairs, VS questions without a figure)
    and random answers; lmms-eval's judge is stubbed to give the verdicts our rules give."""
    rng = random.Random(0)
    extract = EXTRACTORS.get("yes_no")
    metrics = {key: METRICS.get(f"hallusion_{key.lower()}") for key in ("aAcc", "fAcc", "qAcc")}
    for _ in range(40):
        cells = [(c, sub, s, f, q) for c in ("VD", "VS") for sub in ("chart", "map") for s in "01" for f in "012"
                 for q in "01"]  # fmt: skip
        docs = [dict(zip(("category", "subcategory", "set_id", "figure_id", "question_id"), cell, strict=True))
                | {"gt_answer": rng.choice("01"), "visual_input": cell[3], "question": "?", "gt_answer_details": ""}
                for cell in rng.sample(cells, rng.randint(8, len(cells)))]  # fmt: skip
        answers = [rng.choice(["Yes.", "No", "yes, it is", "I cannot tell.", "no way"]) for _ in docs]
        items, verdicts = [], []
        for doc, answer in zip(docs, answers, strict=True):
            found = extract(answer, (), doc).value
            items.append(metrics["aAcc"].score(found, [doc["gt_answer"]], doc))
            verdicts.append(hallusion_verdict(found, doc["gt_answer"]))
        theirs = lmms_eval_hallusion(docs, verdicts, tmp_path)
        assert {k: m.aggregate(items) for k, m in metrics.items()} == pytest.approx(theirs, abs=1e-4)


def test_the_hallusion_judge_is_asked_and_read_as_lmms_eval_asks_and_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """lmms-eval's own evaluate_by_chatgpt, with its HTTP call replaced by a recorder, sends the
    query our judge gets and reads the same verdict from the same reply."""
    peer = lmms_eval_module("tasks.hallusion_bench.utils")
    sent: list[str] = []
    reply = {"text": ""}

    class Reply:
        def raise_for_status(self) -> None:
            pass

        def json(self) -> dict[str, Any]:
            return {"choices": [{"message": {"content": reply["text"]}}]}

    def post(url: str, headers: Any = None, json: Any = None, timeout: float = 0) -> Reply:
        sent.append(json["messages"][0]["content"])
        return Reply()

    monkeypatch.setattr(peer.requests, "post", post)
    pred = "Yes, I believe the statement holds."
    asked = judge_queries(monkeypatch, tmp_path / "data", "hallusion_bench_image", hallusion_rows(), HALLUSION,
                          lambda r: pred)  # fmt: skip
    for row, _, calls in asked:
        _, prompt, case = calls[0]
        # The three metrics ask the same question (the judge is asked it once).
        assert {(p.id, p.render(c)) for _, p, c in calls} == {("hallusion_correctness@1", prompt.render(case))}
        for text in ("correct", "Incorrect.", "The answer is unclear", "I cannot say"):
            reply["text"] = text
            sample = {**{k: v for k, v in row.items() if k != "image"}, "model_prediction": pred}
            [theirs] = peer.evaluate_by_chatgpt([sample], "model_prediction", "gpt_check",
                                                save_json_path=str(tmp_path / "hb.json"))  # fmt: skip
            assert prompt.render(case) == sent[-1]
            assert prompt.read(text, case) == int(theirs["gpt_check"]), text
