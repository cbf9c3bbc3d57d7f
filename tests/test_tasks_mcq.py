"""The multiple-choice benchmarks (ai2d, scienceqa_img, mmmu_val, cmmmu_val, seedbench, mmbench_en_dev,
mmbench_cn_dev, realworldqa, mmstar and the Lite subsets of ai2d, mmbench and seedbench) run by name on
fixtures in their hub schemas, with lmms-eval 0.7.3's prompts, result keys, answer readings and scores.

Hub schemas are the dataset cards' `dataset_info` features (lmms-eval 0.7.3 reads the
lmms-lab-encoder copies of the lmms-lab datasets): lmms-lab/ai2d, lmms-lab/ScienceQA config
ScienceQA-IMG, lmms-lab/MMMU, lmms-lab/CMMMU, lmms-lab/MMBench configs en and cn (the card lists
`index` as int64 for cn; en is taken to match, as lmms-eval compares it with 1e6),
lmms-lab/RealWorldQA (image, question, answer) and Lin-Chen/MMStar. lmms-lab/SEED-Bench's card was
not available: its columns are those lmms-eval reads (question, choice_a-d, answer, data_type,
question_id, image as a list of images) plus data_id and question_type_id from the original
SEED-Bench loader, with question_type_id typed int16 as in lmms-lab/SEED-Bench-2 (nothing reads
it); its `segment` column (video rows only) is left out. The Lite configs are assumed to keep the
full datasets' columns.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
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

from fastmmeval.errors import DocError
from fastmmeval.extract import EXTRACTORS
from fastmmeval.metrics import METRICS
from fastmmeval.parity import PeerTask
from fastmmeval.tasks.families import mcq, mmmu
from fastmmeval.tasks.processors import DOC_PROCESSORS

S, IMAGE = datasets.Value("string"), datasets.Image()
INT64, SEQ = datasets.Value("int64"), datasets.Sequence(datasets.Value("string"))

AI2D = datasets.Features({"question": S, "options": SEQ, "answer": S, "image": IMAGE})
SCIENCEQA = datasets.Features({
    "image": IMAGE, "question": S, "choices": SEQ, "answer": datasets.Value("int8"), "hint": S, "task": S, "grade": S,
    "subject": S, "topic": S, "category": S, "skill": S, "lecture": S, "solution": S,
})  # fmt: skip
MMMU = datasets.Features({
    "id": S, "question": S, "options": S, "explanation": S, **{f"image_{i}": IMAGE for i in range(1, 8)},
    "img_type": S, "answer": S, "topic_difficulty": S, "question_type": S, "subfield": S,
})  # fmt: skip
CMMMU = datasets.Features({
    "id": S, "type": S, "source_type": S, "source": S, "question": S, **{f"option{i}": S for i in range(1, 5)},
    **{f"image_{i}": IMAGE for i in range(1, 6)}, "answer": S, "analysis": S, "distribution": S,
    "difficulty_level": S, "subcategory": S, "category": S, "subfield": S, "img_type": S,
    **{f"image_{i}_filename": S for i in range(1, 6)},
})  # fmt: skip
SEEDBENCH = datasets.Features({
    "answer": S, **{f"choice_{c}": S for c in "abcd"}, "data_id": S, "data_type": S, "question": S,
    "question_id": S, "question_type_id": datasets.Value("int16"), "image": datasets.Sequence(IMAGE),
})  # fmt: skip
MMBENCH = datasets.Features({
    "index": INT64, "question": S, "hint": S, "answer": S, "A": S, "B": S, "C": S, "D": S, "category": S,
    "image": IMAGE, "source": S, "L2-category": S, "comment": S, "split": S,
})  # fmt: skip
REALWORLDQA = datasets.Features({"image": IMAGE, "question": S, "answer": S})
MMSTAR = datasets.Features({
    "index": INT64, "question": S, "image": IMAGE, "answer": S, "category": S, "l2_category": S,
    "meta_info": {"source": S, "split": S, "image_path": S},
})  # fmt: skip


def lmms(module: str) -> Any:
    """lmms-eval 0.7.3's task module `lmms_eval.tasks.<module>`. Its shared MCQ reader is imported
    first: mmstar, realworldqa and MMBench import it lazily, which works only once it is loaded."""
    lmms_eval_module("tasks._task_utils.mcq_extract")
    return lmms_eval_module(f"tasks.{module}")


def lmms_hook(task_dir: str, yaml_file: str, key: str) -> Callable[..., Any]:
    """The function lmms-eval's task file names under `key` (e.g. doc_to_visual)."""
    module, name = lmms_eval_yaml(task_dir, yaml_file)[key].rsplit(".", 1)
    return getattr(lmms(f"{task_dir}.{module}"), name)


# --- the fixtures, one per benchmark -----------------------------------------------------------


def ai2d_rows() -> list[dict[str, Any]]:
    rows = [
        ("Which stage comes after the egg?", ["adult", "larva", "pupa", "egg"], "1"),
        ("How many legs does the insect have?", ["4", "6", "2", "8"], "1"),  # option texts that look like indices
        ("What eats the grass?", ["hawk", "snake", "rabbit"], "2"),
        ("Which part absorbs water?", ["leaf", "stem", "root", "flower"], "2"),
    ]
    return [{"question": q, "options": o, "answer": a, "image": photo(i, 48)} for i, (q, o, a) in enumerate(rows)]


def scienceqa_rows() -> list[dict[str, Any]]:
    rows = [
        ("Which animal is shown?", ["cat", "dog"], 0, ""),
        ("Which is a planet?", ["Moon", "Sun", "Mars"], 2, "Look at the night sky."),
        ("Which material is this cup made of?", ["glass", "ceramic"], 1, ""),
        ("What is the rocket made for?", ["flying", "swimming"], 0, "A rocket carries people to space."),
    ]
    return [
        {"image": photo(i, 48), "question": q, "choices": c, "answer": a, "hint": h, "task": "closed choice",
         "grade": "grade4", "subject": "natural science", "topic": "science", "category": "Identify", "skill": "s",
         "lecture": "", "solution": ""}
        for i, (q, c, a, h) in enumerate(rows)
    ]  # fmt: skip


def mmmu_row(qid: str, question: str, options: str, answer: str, kind: str, images: int) -> dict[str, Any]:
    return {
        "id": qid, "question": question, "options": options, "explanation": "", "img_type": "['Photographs']",
        "answer": answer, "topic_difficulty": "Easy", "question_type": kind, "subfield": "General",
        **{f"image_{i}": photo(i, 40) if i <= images else None for i in range(1, 8)},
    }  # fmt: skip


def mmmu_rows() -> list[dict[str, Any]]:
    return [
        mmmu_row("validation_Art_Theory_1", "<image 1> Which art movement is this painting from?",
                 "['Cubism', 'Impressionism', 'Baroque', 'Pop art']", "B", "multiple-choice", 1),
        mmmu_row("validation_Biology_2", "Which photo shows a cat?", "['<image 1>', '<image 2>', '<image 3>']", "B",
                 "multiple-choice", 3),  # images named only in the options
        mmmu_row("validation_Math_3", "How many coins are in <image 1>?", "[]", "12", "open", 1),
        mmmu_row("validation_Physics_4", "<image 2> and <image 1> show the same object. What is it?", "[]",
                 "rocket", "open", 2),  # named out of order: shown in name order
        mmmu_row("validation_Computer_Science_5", "<image 1> Which key is highlighted?",
                 "['Enter', 'Shift', 'Escape']", "C", "multiple-choice", 1),
    ]  # fmt: skip


def cmmmu_row(qid: str, kind: str, question: str, options: list[str], answer: str, files: list[str]) -> dict[str, Any]:
    return {
        "id": qid, "type": kind, "source_type": "textbook", "source": "", "question": question,
        **{f"option{i + 1}": (options[i] if i < len(options) else None) for i in range(4)},
        **{f"image_{i}": photo(i, 40) if i <= len(files) else None for i in range(1, 6)},
        "answer": answer, "analysis": "", "distribution": "", "difficulty_level": "easy", "subcategory": "生物",
        "category": "科学", "subfield": "动物学", "img_type": "['照片']",
        **{f"image_{i}_filename": files[i - 1] if i <= len(files) else None for i in range(1, 6)},
    }  # fmt: skip


def cmmmu_rows() -> list[dict[str, Any]]:
    return [
        cmmmu_row("1", "选择", '<img="cat.png">图中是什么动物？', ["猫", "狗", "鸟", "鱼"], "A", ["cat.png"]),
        cmmmu_row("2", "判断", '<img="cat.png">图中的动物是一只猫。', [], "对", ["cat.png"]),
        cmmmu_row("3", "填空", '<img="b.png"><img="a.png">两张图中共有几只动物？', [], "2", ["a.png", "b.png"]),
        cmmmu_row("4", "选择", '<img="cup.png">杯子里是什么？', ["茶", "牛奶", "咖啡", "果汁"], "C", ["cup.png"]),
        cmmmu_row("5", "判断", '<img="r.png">图中是一辆汽车。', [], "错", ["r.png"]),
        cmmmu_row("6", "填空", '<img="r.png">火箭有几节？', [], "3", ["r.png"]),
    ]


def seedbench_rows() -> list[dict[str, Any]]:
    rows = [
        ("101669", "image", "What is the main object in the image?", ["A dog", "A cat", "A car", "A tree"], "B", 1),
        ("101670", "image", "What is the person wearing?", ["A suit", "A spacesuit", "A dress", "A coat"], "B", 1),
        ("v_3001", "video", "What happens in the video?", ["Launch", "Landing", "Crash", "Nothing"], "A", 3),
        ("101671", "image", "What drink is in the cup?", ["Tea", "Juice", "Coffee", "Water"], "C", 1),
        ("101672", "image", "Where is the rocket?", ["On a pad", "In space", "Underwater", "In a garage"], "A", 1),
    ]
    return [
        {"answer": a, **dict(zip(["choice_a", "choice_b", "choice_c", "choice_d"], c, strict=True)),
         "data_id": f"{qid}.jpg", "data_type": kind, "question": q, "question_id": qid, "question_type_id": 1,
         "image": [photo(i + j, 40) for j in range(n)]}
        for i, (qid, kind, q, c, a, n) in enumerate(rows)
    ]  # fmt: skip


def mmbench_rows() -> list[dict[str, Any]]:
    rows = [  # (index, hint, question, options, answer, photo): rotations k of question i have index i + k * 1e6
        (0, None, "What animal is in the photo?", ["A cat", "A dog", "A horse", "A bird"], "A", 1),
        (1000000, None, "What animal is in the photo?", ["A dog", "A horse", "A bird", "A cat"], "D", 1),
        (1, "The photo was taken in a kitchen.", "What is in the cup?", ["Coffee", "Milk", "Juice"], "A", 2),
        (2, "nan", "What is on the launch pad?", ["A plane", "A rocket"], "B", 3),
        (1000002, "nan", "What is on the launch pad?", ["A rocket", "A plane"], "A", 3),
    ]
    return [
        {"index": index, "question": q, "hint": hint, "answer": a,
         **{c: (o[i] if i < len(o) else None) for i, c in enumerate("ABCD")}, "category": "object_localization",
         "image": photo(p, 48), "source": "MMBench", "L2-category": "finegrained_perception (instance-level)",
         "comment": None, "split": "dev"}
        for index, hint, q, o, a, p in rows
    ]  # fmt: skip


def realworldqa_rows() -> list[dict[str, Any]]:
    letter = "\nPlease answer directly with only the letter of the correct option and nothing else."
    word = "\nPlease answer directly with a single word or number."
    rows = [
        ("Which way is the road turning?\nA. Left\nB. Right\nC. Straight" + letter, "A"),
        ("How many lanes are there?" + word, "2"),
        ("  Is the road going uphill or downhill?" + word + "  ", "Downhill"),
        ("What color is the traffic light?\nA. Red\nB. Green\nC. Yellow" + letter, "B"),
        ("How many cars are visible?" + word, "3"),
    ]
    return [{"image": photo(i, 48), "question": q, "answer": a} for i, (q, a) in enumerate(rows)]


def mmstar_rows() -> list[dict[str, Any]]:
    options = "\nOptions: A: cat, B: dog, C: bird, D: fish"
    rows = [
        ("coarse perception", "image scene and topic", "What is the main subject?" + options, "A"),
        ("coarse perception", "image emotion", "Which animal looks calm?" + options, "B"),
        ("math", "geometry", "Which shape is round?\nOptions: A: square, B: cube, C: circle, D: line", "C"),
        ("math", "numeric commonsense and calculation", "How many legs?\nOptions: A: 1, B: 2, C: 3, D: 4", "D"),
        ("logical reasoning", "diagram reasoning", "Is the cat above the dog? Please answer yes or no." + options, "A"),
    ]
    return [
        {"index": i, "question": q, "image": photo(i, 48), "answer": a, "category": c, "l2_category": l2,
         "meta_info": {"source": "MMBench", "split": "val", "image_path": f"images/{i}.jpg"}}
        for i, (c, l2, q, a) in enumerate(rows)
    ]  # fmt: skip


# --- lmms-eval's own score of an answer, and its aggregates ------------------------------------


def ai2d_lmms_score(doc: dict[str, Any], answer: str) -> float:
    """lmms-eval's ai2d flexible-extract filter and exact_match (ignore case and punctuation); the
    answer stripped, as lmms-eval's model wrappers return it."""
    utils = lmms("ai2d.utils")
    flt = utils.MultiChoiceRegexFilter(regex_pattern=r"([A-Z])\.", group_select=0, ignore_case=True,
                                       ignore_punctuation=True)  # fmt: skip
    filtered = flt.apply([[answer.strip()]], [doc])[0]
    metric = lmms_eval_module("api.metrics").exact_match_hf_evaluate
    target = utils.ai2d_doc_to_target(doc, "mcq")
    return float(metric(predictions=[filtered], references=[target], ignore_case=True, ignore_punctuation=True)[
        "exact_match"])  # fmt: skip


def scienceqa_lmms_score(doc: dict[str, Any], answer: str) -> float:
    return lmms("scienceqa.utils").sqa_process_results(doc, [answer])["exact_match"]


def seedbench_lmms_results(pairs: list[tuple[dict[str, Any], str]]) -> dict[str, float | None]:
    utils = lmms("seedbench.utils")
    items = [utils.seed_process_result(doc, [answer]) for doc, answer in pairs]
    return {key: utils.seed_aggregation_result([i[key] for i in items]) for key in ("seed_image", "seed_all")}


def realworldqa_lmms_score(doc: dict[str, Any], answer: str) -> float:
    return lmms("realworldqa.utils").realworldqa_process_results(doc, [answer])["exact_match"]


def mmstar_lmms_results(pairs: list[tuple[dict[str, Any], str]]) -> dict[str, float | None]:
    utils = lmms("mmstar.utils")
    items = [utils.mmstar_process_results(doc, [answer]) for doc, answer in pairs]
    present = {key: [i[key] for i in items if key in i] for key in ("average", *mcq.MMSTAR_CATEGORIES)}
    return {key: utils.mmstar_aggregate_results(found) if found else None for key, found in present.items()}


def mmmu_lmms_results(pairs: list[tuple[dict[str, Any], str]]) -> dict[str, float | None]:
    utils = lmms("mmmu.utils")
    items = [utils.mmmu_process_results(doc, [answer])["mmmu_acc"] for doc, answer in pairs]
    return {"mmmu_acc": utils.mmmu_aggregate_results(items)}


def mmmu_chat_messages(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages lmms-eval's chat models get for an MMMU doc (mmmu_doc_to_messages under the
    task file's default kwargs). It turns its module's `interleaved_format` on for good, after which
    its doc_to_text writes `<image>` for the tags; the flag is set back so other calls see no change."""
    utils = lmms("mmmu.utils")
    kwargs = lmms_eval_yaml("mmmu", "mmmu_val.yaml")["lmms_eval_specific_kwargs"]["default"]
    metadata = utils.config["metadata"]
    saved = metadata["interleaved_format"]
    try:
        return utils.mmmu_doc_to_messages(copy.deepcopy(doc), kwargs)
    finally:
        metadata["interleaved_format"] = saved


def mmmu_chat_text(doc: dict[str, Any]) -> str:
    """The text of `mmmu_chat_messages`, `<image>` where each image stands."""
    parts = [c for m in mmmu_chat_messages(doc) for c in m["content"]]
    return "".join(c["text"] if c["type"] == "text" else "<image>" for c in parts)


def cmmmu_lmms_results(pairs: list[tuple[dict[str, Any], str]]) -> dict[str, float | None]:
    utils = lmms("cmmmu.utils")
    items = [utils.cmmmu_process_results(doc, [answer])["cmmmu_acc"] for doc, answer in pairs]
    return {"cmmmu_acc": utils.cmmmu_aggregate_results(items)}


def mmbench_lmms_results(task_dir_module: str) -> Callable[[list[tuple[dict[str, Any], str]]], dict[str, float]]:
    """lmms-eval's gpt_eval_score: its CircularEval accuracy (MMBench_Evaluator.eval_result) x100, as
    mmbench_aggregate_dev_results_eval reports it. Its static method equals its GPT method when its
    rules read every answer, as in these fixtures (GPT is asked only otherwise)."""

    def results(pairs: list[tuple[dict[str, Any], str]]) -> dict[str, float]:
        utils = lmms(f"mmbench.{task_dir_module}")
        items = [utils.mmbench_process_results(d, [a])["gpt_eval_score"] for d, a in pairs]
        for item in items:
            assert utils.mmbench_evaluator.prefetch_answer(dict(item)), item["prediction"]  # no GPT needed
        return {"gpt_eval_score": utils.mmbench_evaluator.eval_result(items, eval_method="static")[0] * 100}

    return results


@dataclass(frozen=True)
class Bench:
    """One benchmark's fixture: rows in its hub schema, then per doc id an answer lmms-eval scores
    right (in a surface form its reading must accept) or wrong; lmms-eval's score of one answer
    (its process_results / filter + metric), or its aggregate over the fixture's answers."""

    task: str
    lmms_dir: str
    features: datasets.Features
    rows: Callable[[], list[dict[str, Any]]]
    id_field: str | None  # None: doc ids are row numbers
    right: dict[str, str]
    wrong: dict[str, str]
    metric: str  # the per-doc metric checked right/wrong
    lmms_score: Callable[[dict[str, Any], str], float] | None = None
    lmms_results: Callable[[list[tuple[dict[str, Any], str]]], dict[str, float | None]] | None = None

    def doc_id(self, index: int, row: dict[str, Any]) -> str:
        return str(index if self.id_field is None else row[self.id_field])


BENCHES = [
    Bench("ai2d", "ai2d", AI2D, ai2d_rows, None,
          {"0": "B.", "1": "(B)", "2": "c"}, {"3": "B"}, "exact_match", lmms_score=ai2d_lmms_score),
    Bench("scienceqa_img", "scienceqa", SCIENCEQA, scienceqa_rows, None,
          {"0": "A", "1": "c", "2": "B. ceramic"}, {"3": "B"}, "exact_match", lmms_score=scienceqa_lmms_score),
    Bench("mmmu_val", "mmmu", MMMU, mmmu_rows, "id",
          {"validation_Art_Theory_1": "B", "validation_Biology_2": "The answer is (B).",
           "validation_Math_3": "There are 12 coins.", "validation_Physics_4": "It is a rocket."},
          {"validation_Computer_Science_5": "(A) Enter"}, "mmmu_acc", lmms_results=mmmu_lmms_results),
    Bench("cmmmu_val", "cmmmu", CMMMU, cmmmu_rows, "id",
          {"1": "A", "2": "这个说法是正确的。", "3": "答案是2只"}, {"4": "(B)", "5": "正确", "6": "答案是4节"},
          "cmmmu_acc", lmms_results=cmmmu_lmms_results),
    Bench("seedbench", "seedbench", SEEDBENCH, seedbench_rows, "question_id",
          {"101669": "B", "101670": "b) A spacesuit", "101671": "C."}, {"101672": "The answer is A"}, "seed_image",
          lmms_results=seedbench_lmms_results),
    Bench("mmbench_en_dev", "mmbench", MMBENCH, mmbench_rows, "index",
          {"0": "A", "1000000": "The answer is D.", "1": "(A) Coffee", "2": "B"}, {"1000002": "B"},
          "gpt_eval_score", lmms_results=mmbench_lmms_results("en_utils")),
    Bench("mmbench_cn_dev", "mmbench", MMBENCH, mmbench_rows, "index",
          {"0": "A", "1000000": "D", "1": "A", "2": "B"}, {"1000002": "B"}, "gpt_eval_score",
          lmms_results=mmbench_lmms_results("cn_utils")),
    Bench("realworldqa", "realworldqa", REALWORLDQA, realworldqa_rows, None,
          {"0": "A.", "1": "2.", "2": "downhill"}, {"3": "I think (C)", "4": "three"}, "exact_match",
          lmms_score=realworldqa_lmms_score),
    Bench("mmstar", "mmstar", MMSTAR, mmstar_rows, "index",
          {"0": "A", "1": "(B) dog", "3": "The answer is D"}, {"2": "D", "4": "B"}, "average",
          lmms_results=mmstar_lmms_results),
]  # fmt: skip
BY_TASK = {b.task: b for b in BENCHES}


def scripted_judge(tmp_path: Path) -> list[str]:
    """`--judge_config` flags for tests/judge_fixtures.py's scripted judge."""
    config = tmp_path / "judges.json"
    config.write_text(json.dumps({"judges": [{"name": "judge", "model": "scripted_judge", "args": {}}]}))
    return ["--judge_config", str(config)]


def correct(value: Any) -> float:
    """A per-doc metric item as right (1.0) or wrong (0.0): a float, or a dict with `correct`."""
    return float(value["correct"]) if isinstance(value, dict) else value


@pytest.mark.parametrize("bench", BENCHES, ids=lambda b: b.task)
def test_a_task_runs_with_lmms_eval_prompt_result_keys_and_score(bench: Bench, tmp_path: Path) -> None:
    rows = bench.rows()
    save_split(tmp_path / "data", task_config(bench.task), rows, bench.features)
    answers = {**bench.right, **bench.wrong}
    judged = task_config(bench.task).extractor == "mmbench_judge"  # MMBench: needs a judge, asks none here
    extra = scripted_judge(tmp_path) if judged else []
    results, samples = run_task(tmp_path, tmp_path / "data", bench.task, answers, list(answers), *extra)
    by_id = {bench.doc_id(i, r): r for i, r in enumerate(rows)}
    assert sorted(s["doc_id"] for s in samples) == sorted(answers)  # SEED-Bench's video row is left out
    assert [s.get("failed") for s in samples] == [None] * len(samples)
    assert_renders(samples)
    yaml_file = f"{bench.task}.yaml"
    for s in samples:
        doc, answer = by_id[s["doc_id"]], answers[s["doc_id"]]
        ours, theirs = prompt_text(s).replace("<image>", ""), lmms_eval_prompt(bench.lmms_dir, yaml_file, doc)
        if bench.task == "mmmu_val":  # lmms-eval's chat path interleaves the images: its doc_to_messages
            ours, theirs = prompt_text(s), mmmu_chat_text(doc)
        if bench.task == "mmbench_cn_dev" and doc["hint"] == "nan":  # a listed difference
            assert theirs == "nan " + ours
        else:
            assert ours == theirs
        assert len(s["images"]) == len(lmms_hook(bench.lmms_dir, yaml_file, "doc_to_visual")(doc))
        assert correct(s["metrics"][bench.metric]) == (1.0 if s["doc_id"] in bench.right else 0.0), (s, answer)
        if bench.lmms_score:
            assert correct(s["metrics"][bench.metric]) == bench.lmms_score(copy.deepcopy(doc), answer)
        assert not s.get("judgments"), "the rules read every answer of the fixture"
    lmms_task = task_config(bench.task).lmms_eval.task  # type: ignore[union-attr]
    reported = {k for k in PeerTask.load(lmms_task).result_keys() if not k.startswith("seed_video,")}  # image rows only
    assert reported <= set(results)  # lmms-eval's `metric,filter` keys
    key_of = {k.split(",")[0]: k for k in reported}
    expected = {bench.metric: len(bench.right) / len(answers)}
    if bench.lmms_results:
        expected = bench.lmms_results([(copy.deepcopy(by_id[d]), a) for d, a in answers.items()])
    for key, value in expected.items():
        expected_value = None if value is None else pytest.approx(value, abs=1e-5)
        assert results[key_of.get(key, f"{key},none")] == expected_value, key


def test_mmstar_reports_the_average_of_l2_categories_and_each_category_present() -> None:
    """The fixture's right answers: two of two coarse perception L2 categories, one of two math
    ones, none of one logical reasoning one; absent categories have no value."""
    expected = mmstar_lmms_results([(r, BY_TASK["mmstar"].right.get(str(i), "X")) for i, r in enumerate(mmstar_rows())])
    assert expected["average"] == pytest.approx(3 / 5) and expected["coarse perception"] == 1.0
    assert expected["math"] == 0.5 and expected["logical reasoning"] == 0.0 and expected["science & technology"] is None


def test_mmbench_reads_an_unruly_answer_with_the_judge(tmp_path: Path) -> None:
    """Rules first, then the run's judge (`--judge_config`), then unparsed: "Cat." matches no option
    by the rules, the scripted judge finds "A cat"."""
    save_split(tmp_path / "data", task_config("mmbench_en_dev"), mmbench_rows(), MMBENCH)
    answers = {"0": "Cat.", "1000000": "D", "1": "A", "2": "no idea", "1000002": "A"}
    results, samples = run_task(tmp_path, tmp_path / "data", "mmbench_en_dev", answers, list(answers),
                                *scripted_judge(tmp_path))  # fmt: skip
    by_id = {s["doc_id"]: s for s in samples}
    assert (by_id["0"]["extract_rule"], by_id["0"]["extracted"]) == ("judge", "A")
    assert by_id["1000000"]["extract_rule"] == "letter" and not by_id["1000000"]["judgments"]
    assert (by_id["2"]["extract_rule"], by_id["2"]["extracted"]) == ("unparsed", None)  # the judge found none
    assert results["gpt_eval_score,none"] == pytest.approx(200 / 3)  # on 0-100, as lmms-eval reports it


def test_lmms_eval_s_data_generation_and_task_names() -> None:
    for name in [*BY_TASK, "ai2d_lite", "mmbench_en_dev_lite", "mmbench_cn_dev_lite", "seedbench_lite"]:
        bench = BY_TASK[name.removesuffix("_lite")]
        yaml, config = lmms_eval_yaml(bench.lmms_dir, f"{name}.yaml"), task_config(name)
        assert (config.dataset.path, config.dataset.name, config.split) == (
            yaml["dataset_path"], yaml.get("dataset_name"), yaml["test_split"])  # fmt: skip
        kwargs = yaml.get("generation_kwargs") or {}
        assert list(config.generation.stop) == kwargs.get("until", ["\n\n"]), name  # lmms-eval's default `until`
        assert config.generation.max_new_tokens == kwargs.get("max_new_tokens", 1024), name  # its models' default
        assert config.generation.temperature == kwargs.get("temperature", 0), name
        assert config.generation.top_p == kwargs.get("top_p", 1.0), name
        assert config.lmms_eval is not None and config.lmms_eval.task == name
        assert config.group == (("lmms_eval_lite",) if name.endswith("_lite") else ("mcq",)), name


@pytest.mark.parametrize("name", ["ai2d_lite", "mmbench_en_dev_lite", "mmbench_cn_dev_lite", "seedbench_lite"])
def test_a_lite_task_is_its_full_task_on_lmms_eval_lite_data(name: str) -> None:
    bench = BY_TASK[name.removesuffix("_lite")]
    full, lite = task_config(bench.task), task_config(name)
    assert lite.group == ("lmms_eval_lite",) and lite.docs == 500 and lite.split == "lite"
    assert (lite.dataset.path, lite.dataset.name) == ("lmms-lab-encoder/LMMs-Eval-Lite", bench.task)
    differ = {"task", "dataset", "split", "docs", "group", "description", "source_file", "lmms_eval"}
    protocol = [f.name for f in fields(full) if f.name not in differ]
    assert {n: getattr(lite, n) for n in protocol} == {n: getattr(full, n) for n in protocol}
    assert lite.lmms_eval is not None and full.lmms_eval is not None
    full_differences = {d.replace(", 14233 of the split's 17990 rows", "") for d in full.lmms_eval.differences.values()}
    assert full_differences <= set(lite.lmms_eval.differences.values())  # MMBench Lite adds one on partial rotations
    for doc in bench.rows()[:2]:
        assert lmms_eval_prompt(bench.lmms_dir, f"{name}.yaml", doc) == lmms_eval_prompt(
            bench.lmms_dir, f"{bench.task}.yaml", doc)  # fmt: skip


def test_images_are_those_lmms_eval_shows_in_its_order() -> None:
    """CMMMU: the images its tags name, in the order they appear (MMMU's, interleaved with the text:
    tests/test_interleave.py)."""

    def pixels(images: list[Any]) -> list[bytes]:
        return [image.convert("RGB").tobytes() for image in images]

    for row in cmmmu_rows():
        assert pixels(mmmu.cmmmu(row)["images"]) == pixels(lmms("cmmmu.utils").cmmmu_doc_to_visual(row))
    assert pixels(mmmu.cmmmu(cmmmu_rows()[2])["images"]) == pixels([photo(2, 40), photo(1, 40)])


def test_bad_rows_fail_naming_the_field() -> None:
    with pytest.raises(DocError, match="field 'answer' must be the index of one of the 4 options"):
        DOC_PROCESSORS.get("ai2d")({**ai2d_rows()[0], "answer": "4"})
    with pytest.raises(DocError, match="field 'options' is not a Python list literal"):
        mmmu.mmmu({**mmmu_rows()[0], "options": "['a', "})
    with pytest.raises(DocError, match="options must be columns A, B, ... without gaps, got ABD"):
        mcq.mmbench({**mmbench_rows()[0], "C": None})
    with pytest.raises(DocError, match="field 'type' must be one of"):
        mmmu.cmmmu({**cmmmu_rows()[0], "type": "问答"})


# --- answer readings against lmms-eval's own functions, on tricky answers ------------------------

TRICKY = [
    "A", "B", "b", "B.", " B. cat", "(B)", "**B**", "B) cat", "B:", "The answer is B", "The answer is (C).",
    "I choose D because it is round.", "答案是B", "Answer: A", "A and B", "Dunno", "cat", "", "  ", ".", "B!",
    "'b'", "BB", "B C", "Both A: x and B: y", "Option D.", "ABCD", "It is B", "I think it's A, but B.", "none",
    "(A) dog (B) cat", "Z.", "a. the first", "C\n", "E", "The correct option is C, not A",
    "(A) is wrong, the answer is B really", "So A) or B ok",
]  # fmt: skip


def test_ai2d_scienceqa_and_seedbench_read_answers_as_lmms_eval() -> None:
    ai2d, sqa, seed = ai2d_rows()[0], scienceqa_rows()[0], seedbench_rows()[0]
    exact = METRICS.get("exact_match").score
    for answer in TRICKY:
        ours = EXTRACTORS.get("ai2d_letter")(answer, ai2d["options"], ai2d)
        assert exact(ours.value, ["B"], {}) == ai2d_lmms_score(ai2d, answer), answer
        ours = EXTRACTORS.get("scienceqa_letter")(answer, sqa["choices"], sqa)
        assert float(ours.value == "A") == scienceqa_lmms_score(sqa, answer), answer
        ours = EXTRACTORS.get("first_char")(answer, [], seed)
        assert float(ours.value == "B") == seedbench_lmms_results([(seed, answer)])["seed_image"], answer


def test_mcq_extract_equals_lmms_eval_s_extract_mcq_answer() -> None:
    theirs = lmms("_task_utils.mcq_extract").extract_mcq_answer
    rng = random.Random(0)
    pieces = ["A", "B", "C", "D", "E", "(", ")", ".", ":", " ", "the answer is ", "is ", "a", "cat", "选", "\n"]
    generated = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 6))) for _ in range(2000)]
    for answer in TRICKY + generated:
        for choices in ("ABCD", "ABCDE"):
            ours = mcq.extract_mcq_answer(answer, choices)
            assert (ours.value or "") == theirs(answer, choices=list(choices)), (answer, choices, ours)
    assert mcq.extract_mcq_answer("Dunno").rule == "fallback" and mcq.extract_mcq_answer("none").value is None


def test_mmbench_rules_read_answers_as_lmms_eval_s_evaluator() -> None:
    """Before its judge is asked, MMBench's option is read as lmms-eval's MMBench_Evaluator.prefetch_answer
    reads it, on the stripped answer (mmbench_process_results' prediction); None where it reads none."""
    evaluator = lmms("mmbench.en_utils").mmbench_evaluator
    rng = random.Random(0)
    pieces = ["A", "B", "C", "D", "E", "(", ")", ".", ":", ",", " ", "  ", "a cat", "Dog", "the answer is ", "\n"]
    generated = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 7))) for _ in range(2000)]
    read = EXTRACTORS.get("mmbench_judge")
    for row in (mmbench_rows()[0], mmbench_rows()[3]):  # four options, two
        options = DOC_PROCESSORS.get("mmbench")(row)["choices"]
        for answer in TRICKY + generated:
            theirs = evaluator.prefetch_answer({**row, "prediction": answer.strip()}) or None
            assert read(answer, options, row).value == theirs, (answer, options)
    assert [read(a, ["A cat", "A dog"]).rule for a in ("(B) A dog", "a dog", "A or B")] == [
        "letter", "option_text", "unparsed"]  # fmt: skip


def test_realworldqa_reads_letters_and_words_as_lmms_eval() -> None:
    for row in realworldqa_rows():
        fields = {**row, **DOC_PROCESSORS.get("realworldqa")(row)}
        for answer in [*TRICKY, "2", "2.", "Two", "downhill", "Downhill..", " DOWNHILL ", "Downhill .", "3 cars"]:
            ours = EXTRACTORS.get("realworldqa")(answer, [], fields)
            score = METRICS.get("accuracy").score(ours.value, [fields["answer_key"]], fields)
            assert score == realworldqa_lmms_score(row, answer), (row["answer"], answer)


MMMU_TRICKY = [
    "B", "(B)", "The answer is (C).", "A. Cubism", "I think it is B because of the brushwork.", "B.", "(A) or (B)",
    "Impressionism", "The painting shows light and color typical of Impressionism, so it is", "Cubism or Baroque",
    "A B", "It is A, no wait, it is C ", "b", "Pop art is the style of this picture I believe", "",
    "I would say Baroque here", "I would say Baroque here too",
]  # fmt: skip
OPEN_TRICKY = [
    "12", "There are 12 coins.", "The answer is 1,200.", "so the result is 3.14159", "12.0", "twelve", "x = 12",
    "The object is a rocket.\nIt flies.", "Rocket", "1.2e1", "-3 and 12", "I think it could be a rocket ship",
    "The final answer is 0.5", "", "A", "so 12.", "Thus, 12", "therefore the answer is 12 coins",
    "the answer is 12 so \nnext",
]  # fmt: skip


def test_mmmu_reads_answers_as_lmms_eval() -> None:
    utils = lmms("mmmu.utils")
    options = ["Cubism", "Impressionism", "Baroque", "Pop art"]
    index2ans, letters = utils.get_multi_choice_info(options)
    for answer in MMMU_TRICKY:
        ours = mmmu.parse_mmmu_choice(answer, options)
        theirs = utils.parse_multi_choice_response(answer, letters, index2ans)
        if ours is None:  # lmms-eval picks a random letter here
            assert all(utils.parse_multi_choice_response(answer, letters, index2ans) in letters for _ in range(5))
        else:
            assert ours == theirs, answer
    unread = [a for a in MMMU_TRICKY if mmmu.parse_mmmu_choice(a, options) is None]
    # Option texts count only in answers of more than five words.
    assert unread == ["Impressionism", "Cubism or Baroque", "b", "", "I would say Baroque here"]
    for answer in OPEN_TRICKY:
        ours, theirs = mmmu.parse_mmmu_open(answer), utils.parse_open_response(answer)
        assert sorted(map(str, ours)) == sorted(map(str, theirs)), answer
        for reference in ("12", "rocket", "1200", "3.14", "0.5", "a"):
            assert mmmu.mmmu_open_correct(reference, ours) == utils.eval_open(reference, theirs), (reference, answer)


def test_cmmmu_reads_answers_as_lmms_eval() -> None:
    utils = lmms("cmmmu.utils")
    options = ["猫", "狗", "鸟", "鱼"]
    index2ans, letters = utils.get_multi_choice_info(options)
    choice = ["A", "(B)", "答案是B", "AB", "A和C", "(A)(C)", "是猫", "狗或者鸟", "猫和狗", "DNA", "没有答案", "",
              "B B A"]  # fmt: skip
    for answer in choice:
        ours = mmmu.parse_cmmmu_choice(answer, options)
        theirs = utils.get_multi_choice_prediction(answer, letters, index2ans)
        assert ours == theirs if ours is not None else theirs in letters, answer
    assert mmmu.parse_cmmmu_choice("没有答案", options) is None and mmmu.parse_cmmmu_choice("猫和狗", options) == "AB"
    true_false = ["这个说法是正确的。", "正确", "错误", "不对", "答案是对的", "判断：错", "我不确定", "是否正确不好说",
                  "对。错。"]  # fmt: skip
    for answer in true_false:
        ours = mmmu.parse_cmmmu_true_false(answer)
        for reference in ("对", "错"):
            entry = {"question_type": "判断", "answer": reference, "parsed_pred": utils.get_TF_prediction(answer)}
            if ours is not None:
                assert float(ours == reference) == utils.eval_cmmmu([entry])["acc"], (answer, reference)
    # "不对" (wrong) holds "对" (right) and counts as positive, as upstream; no verdict word is a tie.
    assert [mmmu.parse_cmmmu_true_false(a) for a in ("不对", "我不确定")] == ["对", None]
    # The last four sit at and past the limits on a candidate's length and letters.
    fill = ["答案是2只", "2", "共有2只动物", "结果为2.0", "1，200", "答案是猫", "因此等于3", "3节", "两只", "",
            "答案是" + "猫" * 21, "答案是" + "猫" * 22, "答案是猫ab", "答案是猫abc"]  # fmt: skip
    for answer in fill:
        for reference in ("2", "1200", "3", "猫"):
            entry = {"question_type": "填空", "answer": reference,
                     "parsed_pred": utils.get_fill_blank_prediction(answer, reference)}  # fmt: skip
            ours = mmmu.cmmmu_acc(answer, [reference], {"type": "填空"})
            assert ours == utils.eval_cmmmu([entry])["acc"], (answer, reference)


def test_the_mmbench_judge_is_asked_as_lmms_eval_asks_and_its_reply_read_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For an answer the rules leave to the judge, our judge gets lmms-eval's query word for word
    (`MMBench_Evaluator.build_prompt` over `build_option_str`), and a reply is read as its
    `can_infer` reads it (E: no option)."""
    evaluator = lmms("mmbench.en_utils").mmbench_evaluator
    pred = "It looks like a pet of some kind."
    asked = judge_queries(monkeypatch, tmp_path, "mmbench_en_dev", mmbench_rows(), MMBENCH, lambda r: pred)
    for row, _, [(use, prompt, case)] in asked:
        options = evaluator.build_option_str(evaluator.extract_options(row))
        assert use == "extract" and prompt.render(case) == evaluator.build_prompt(row["question"], options, pred)
        choices = evaluator.build_choices(row)
        replies = ["A", "B", "E", "(C)", "D.", "The answer is A dog", f"The answer is {row['B']}", "B or C",
                   f"{row['A']} and {row['B']}", "a b c", ":B", "Answer: (A)."]  # fmt: skip
        for reply in replies:
            theirs = evaluator.can_infer(reply, dict(choices)) or None
            assert mcq.mmbench_can_infer(reply, case.options) == theirs, reply
