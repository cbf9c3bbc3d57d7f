"""Ability breakdowns: a task file's `breakdown:` names doc fields, and `results.json` reports the task's
metrics on each category's docs alone, with its own n (independent units: MMBench's questions, MME's
images) and stderr (a seeded bootstrap over whole clusters where docs are not independent), under
`results[task]["breakdowns"][field][category]`, keyed as the task's top level. Shown on the benchmark
fixtures against hand computation, lmms-eval 0.7.3's own per-category figures and a plain reference
cluster bootstrap."""

from __future__ import annotations

import json
import math
import random
import re
import statistics
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from task_fixtures import photo, run_task, save_split, task_config
from test_tasks_hallucination import MME, mme_rows
from test_tasks_live_bench import LIVE_BENCH, judges, live_bench_rows
from test_tasks_mcq import BY_TASK, MMBENCH, MMMU, SEEDBENCH, lmms, mmmu_rows, scripted_judge

from fastmmeval.cli import main
from fastmmeval.errors import ConfigError
from fastmmeval.samples import aggregate
from fastmmeval.tasks import resolve
from fastmmeval.tasks.config import parse_task
from fastmmeval.tasks.sources import use_data_dir

ROTATION = 1_000_000
COARSE, INSTANCE, CROSS = "coarse_perception", "finegrained_perception (instance-level)", \
    "finegrained_perception (cross-instance)"  # fmt: skip
# (category, L2-category, options, answer index, whether each rotation is answered right): 8 questions,
# 13 rows. CircularEval: a question is right only when all its rotations are.
QUESTIONS = [
    ("image_scene", COARSE, ["A beach", "A forest", "A city"], 0, [True, True]),
    ("image_scene", COARSE, ["Day", "Night"], 1, [True, False]),
    ("image_scene", COARSE, ["Indoors", "Outdoors", "Underwater", "In space"], 1, [True]),
    ("object_localization", INSTANCE, ["Left", "Right", "Centre"], 2, [True, True]),
    ("object_localization", INSTANCE, ["Top", "Bottom"], 0, [False]),
    ("attribute_comparison", CROSS, ["The cat", "The dog", "Both"], 1, [False, True]),
    ("attribute_comparison", CROSS, ["Red", "Blue", "Green"], 2, [True, True]),
    ("attribute_comparison", CROSS, ["Taller", "Shorter"], 0, [True]),
]
LETTERS = "ABCD"


def mmbench_category_rows() -> tuple[list[dict[str, Any]], dict[str, str]]:
    """MMBench dev rows in the hub schema (every question's rotation 0 first, then the rotations, as
    MMBench dev stores them, so a question's rows are not adjacent) and the scripted answer per doc id."""
    rows, answers = [], {}
    for k in range(2):
        for q, (category, l2, options, answer, right) in enumerate(QUESTIONS):
            if k >= len(right):
                continue
            rotated = options[k:] + options[:k]  # rotation k: the options shifted by k
            letter = LETTERS[rotated.index(options[answer])]
            index = q + k * ROTATION
            rows.append({
                "index": index, "question": f"Question {q}: which is it?", "hint": "nan", "answer": letter,
                **{c: (rotated[i] if i < len(rotated) else None) for i, c in enumerate(LETTERS)},
                "category": category, "image": photo(q, 40), "source": "MMBench", "L2-category": l2,
                "comment": None, "split": "dev",
            })  # fmt: skip
            wrong = LETTERS[(LETTERS.index(letter) + 1) % len(rotated)]
            answers[str(index)] = letter if right[k] else wrong
    return rows, answers


def reference_cluster_stderr(hits: list[float], iters: int, seed: int) -> float:
    """The bootstrap stderr of a mean over independent units (one hit per MMBench question): `iters`
    resamples of the units with replacement, each unit drawn by `random.Random(seed).randrange`."""
    rng = random.Random(seed)
    n = len(hits)
    return statistics.stdev(sum(hits[rng.randrange(n)] for _ in range(n)) / n for _ in range(iters))


def question_hits(category_field: int) -> dict[str, list[float]]:
    """Per category (QUESTIONS' field 0: category, 1: L2-category), each question's CircularEval hit, in
    question order."""
    hits: dict[str, list[float]] = defaultdict(list)
    for question in QUESTIONS:
        hits[question[category_field]].append(float(all(question[4])))
    return dict(hits)


@pytest.fixture(scope="module")
def mmbench_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], list[dict[str, Any]]]:
    """mmbench_en_dev on the category fixture with 200 bootstrap draws at seed 3: (tmp, results, samples)."""
    tmp = tmp_path_factory.mktemp("mmbench")
    rows, answers = mmbench_category_rows()
    save_split(tmp / "data", task_config("mmbench_en_dev"), rows, MMBENCH)
    results, samples = run_task(tmp, tmp / "data", "mmbench_en_dev", answers, list(answers),
                                *scripted_judge(tmp), "--bootstrap_iters", "200", "--seed", "3")  # fmt: skip
    return tmp, results, samples


def test_mmbench_categories_are_circular_eval_on_their_questions_with_n_questions(mmbench_run: Any) -> None:
    _, results, samples = mmbench_run
    assert [s.get("failed") for s in samples] == [None] * 13
    by_l2, by_category = results["breakdowns"]["L2-category"], results["breakdowns"]["category"]
    assert list(results["breakdowns"]) == ["L2-category", "category"]  # the task file's order
    assert list(by_category) == ["attribute_comparison", "image_scene", "object_localization"]  # by name
    # Hand computation (score, questions): image_scene 2 of 3 questions (5 rows), object_localization 1 of 2,
    # attribute_comparison 2 of 3; each L2-category here holds one category.
    expected = {"image_scene": (200 / 3, 3), "object_localization": (50.0, 2), "attribute_comparison": (200 / 3, 3)}
    expected_l2 = {COARSE: (200 / 3, 3), INSTANCE: (50.0, 2), CROSS: (200 / 3, 3)}
    for entries, wanted in ((by_category, expected), (by_l2, expected_l2)):
        assert {c: (pytest.approx(e["gpt_eval_score,none"]), e["n"]) for c, e in entries.items()} == wanted
        assert all(set(e) == {"gpt_eval_score,none", "gpt_eval_score_stderr,none", "n"} for e in entries.values())
    assert results["gpt_eval_score,none"] == pytest.approx(500 / 8)  # the top level is unchanged: 5 of 8


def test_mmbench_categories_equal_lmms_eval_s_per_category_circular_eval(mmbench_run: Any) -> None:
    """lmms-eval's MMBench_Evaluator.eval_result returns CircularEval accuracy per `category` and per
    `l2-category` beside the overall one (its static method: its rules read every answer here)."""
    _, results, _ = mmbench_run
    rows, answers = mmbench_category_rows()
    utils = lmms("mmbench.en_utils")
    items = [utils.mmbench_process_results(row, [answers[str(row["index"])]])["gpt_eval_score"] for row in rows]
    overall, per_category, per_l2 = utils.mmbench_evaluator.eval_result(items, eval_method="static")
    assert results["gpt_eval_score,none"] == pytest.approx(overall * 100)
    for field, theirs in (("category", per_category), ("L2-category", per_l2)):
        ours = {c: e["gpt_eval_score,none"] for c, e in results["breakdowns"][field].items()}
        assert ours == {c: pytest.approx(v * 100) for c, v in theirs.items()}


def test_mmbench_category_stderr_is_a_cluster_bootstrap_over_questions(mmbench_run: Any) -> None:
    """Each category's stderr resamples its questions (all rotations of one together), seeded by the run's
    --seed, --bootstrap_iters draws: a plain reference bootstrap of the questions' hits with the same seed
    gives the same figure, which differs from a bootstrap of rows."""
    _, results, _ = mmbench_run
    for field, index in (("category", 0), ("L2-category", 1)):
        for category, hits in question_hits(index).items():
            entry = results["breakdowns"][field][category]
            reference = 100 * reference_cluster_stderr(hits, 200, 3)
            assert entry["gpt_eval_score_stderr,none"] == pytest.approx(reference, rel=1e-12), (field, category)
    rows_hit = [float(right) for q in QUESTIONS if q[0] == "image_scene" for right in q[4]]  # 5 rows, not 3 questions
    naive = 100 * reference_cluster_stderr(rows_hit, 200, 3)
    assert results["breakdowns"]["category"]["image_scene"]["gpt_eval_score_stderr,none"] != pytest.approx(naive)


def test_each_sample_records_its_categories_and_older_samples_are_read_from_their_docs(mmbench_run: Any) -> None:
    """A sample written before its task file declared a breakdown (a resumed run) has no `categories`:
    its doc is read again, and the breakdowns are the same."""
    tmp, results, samples = mmbench_run
    by_index = {str(q + k * ROTATION): (c, l2) for q, (c, l2, *_rest) in enumerate(QUESTIONS) for k in range(2)}
    assert all(s["categories"] == dict(zip(("L2-category", "category"), by_index[s["doc_id"]][::-1], strict=True))
               for s in samples)  # fmt: skip
    use_data_dir(tmp / "data")
    try:
        [task] = resolve(["mmbench_en_dev"])
        older = [{k: v for k, v in s.items() if k != "categories"} for s in samples]
        assert aggregate(task, older, 200, 3)["breakdowns"] == results["breakdowns"]
    finally:
        use_data_dir(None)


def test_breakdown_leaves_the_fingerprint_and_the_top_level_results_as_they_were(
    mmbench_run: Any, tmp_path: Path
) -> None:
    """`breakdown:` is a view of the scores, not protocol: the fingerprint leaves it out (the pinned
    fingerprints did not move), and a copy of the task without it computes the same top level."""
    tmp, results, _ = mmbench_run
    config = task_config("mmbench_en_dev")
    assert config.breakdown == ("L2-category", "category")
    assert replace(config, breakdown=(), breakdown_where="").fingerprint() == config.fingerprint()
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "plain.yaml").write_text("task: mmbench_plain\nextends: mmbench_en_dev\nbreakdown: null\n")
    _, answers = mmbench_category_rows()
    plain, _ = run_task(tmp_path, tmp / "data", "mmbench_plain", answers, list(answers), *scripted_judge(tmp_path),
                        "--bootstrap_iters", "200", "--seed", "3", "--include_path", str(tasks))  # fmt: skip
    assert "breakdowns" not in plain
    own = ("alias", "fingerprint", "protocol", "timing", "tokens")  # the task's name and this run's times
    same = {k: v for k, v in results.items() if k not in (*own, "breakdowns")}
    assert {k: v for k, v in plain.items() if k not in own} == same


def test_seedbench_by_question_type_is_accuracy_with_its_analytic_stderr(tmp_path: Path) -> None:
    """SEED-Bench's `question_type_id` (a number in the data, its text a category; a doc without one is in
    `(none)`); docs are independent: the stderr is the sample std / sqrt(n) of the category's hits."""
    types = [1, 1, 1, 2, 2, 2, 2, 9, 9, None]
    right = [True, False, True, True, True, False, True, False, False, True]
    rows = [
        {"answer": "B", "choice_a": "A dog", "choice_b": "A cat", "choice_c": "A car", "choice_d": "A tree",
         "data_id": f"{i}.jpg", "data_type": "image", "question": f"What is in picture {i}?",
         "question_id": str(1000 + i), "question_type_id": t, "image": [photo(i, 32)]}
        for i, t in enumerate(types)
    ]  # fmt: skip
    video = {**rows[0], "question_id": "v1", "data_type": "video", "question_type_id": 10}
    save_split(tmp_path / "data", task_config("seedbench"), [*rows, video], SEEDBENCH)
    answers = {r["question_id"]: "B" if ok else "C" for r, ok in zip(rows, right, strict=True)}
    results, _ = run_task(tmp_path, tmp_path / "data", "seedbench", answers, list(answers))
    entries = results["breakdowns"]["question_type_id"]
    assert list(entries) == ["(none)", "1", "2", "9"]  # the video row (type 10) is not a doc of the task
    assert entries["(none)"] == {"seed_image,none": 1.0, "seed_image_stderr,none": 0.0, "seed_all,none": 1.0,
                                 "seed_all_stderr,none": 0.0, "n": 1}  # one doc: 0, as the analytic top level
    for category, t in (("1", 1), ("2", 2), ("9", 9)):
        hits = [float(ok) for ok, kind in zip(right, types, strict=True) if kind == t]
        stderr = statistics.stdev(hits) / math.sqrt(len(hits))
        for key in ("seed_image", "seed_all"):
            assert entries[category][f"{key},none"] == pytest.approx(statistics.fmean(hits))
            assert entries[category][f"{key}_stderr,none"] == pytest.approx(stderr)
        assert entries[category]["n"] == len(hits)


def test_mmmu_by_subject_equals_lmms_eval_s_per_subject_accuracy(tmp_path: Path) -> None:
    """The subject is read from the doc id as lmms-eval's extract_subset_name reads it, and each subject's
    accuracy is its evaluate_mmmu's (the per-subject figures mmmu_aggregate_results prints)."""
    bench = BY_TASK["mmmu_val"]
    rows = mmmu_rows()
    save_split(tmp_path / "data", task_config("mmmu_val"), rows, MMMU)
    answers = {**bench.right, **bench.wrong}
    results, _ = run_task(tmp_path, tmp_path / "data", "mmmu_val", answers, list(answers))
    utils = lmms("mmmu.utils")
    by_subject: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        item = utils.mmmu_process_results(row, [answers[row["id"]]])["mmmu_acc"]
        by_subject[item["subdomain"]].append(item)
    theirs = {s: (utils.evaluate_mmmu(items)[1]["acc"], len(items)) for s, items in by_subject.items()}
    ours = {s: (e["mmmu_acc,none"], e["n"]) for s, e in results["breakdowns"]["subject"].items()}
    assert ours == {s: (pytest.approx(acc), n) for s, (acc, n) in theirs.items()}
    assert set(ours) == {"Art_Theory", "Biology", "Math", "Physics", "Computer_Science"}


def test_mme_by_subtask_has_its_subtask_scores_with_n_images(tmp_path: Path) -> None:
    """MME's subtask figures stay where lmms-eval-style keys put them (`mme_<subtask>_acc`, ...); the
    breakdown holds the same figures with each subtask's n (images: acc+ is per image) and a stderr that
    resamples its images. A perception subtask's entry also has the perception total: its own score."""
    save_split(tmp_path / "data", task_config("mme"), mme_rows(), MME)
    mixed = ["Yes", "Yes", "No", "Yes", "No", "No"]  # existence 1 of 2; count 2 of 2; code_reasoning 1 of 2
    ids = [str(i) for i in range(6)]
    results, _ = run_task(tmp_path, tmp_path / "data", "mme", dict(zip(ids, mixed, strict=True)), ids,
                          "--bootstrap_iters", "50")  # fmt: skip
    entries = results["breakdowns"]["category"]
    assert list(entries) == ["code_reasoning", "count", "existence"]
    for subtask, entry in entries.items():
        assert entry["n"] == 1  # one image of two questions
        for part in ("acc", "acc_plus", "score"):
            assert entry[f"mme_{subtask}_{part},none"] == results[f"mme_{subtask}_{part},none"]
        assert entry[f"mme_{subtask}_score_stderr,none"] is None  # one image: nothing to resample
    assert entries["existence"]["mme_perception_score,none"] == entries["existence"]["mme_existence_score,none"] == 50
    assert "mme_perception_score,none" not in entries["code_reasoning"]
    assert entries["code_reasoning"]["mme_cognition_score,none"] == 50


def test_live_bench_by_subtask_holds_each_subtask_s_score_and_its_judged_docs(tmp_path: Path) -> None:
    save_split(tmp_path / "data", task_config("live_bench_2409"), live_bench_rows(), LIVE_BENCH)
    answers = {"0": "Storm closes schools across the region", "1": "Prices fell", "2": "A storm", "3": "No idea"}
    results, samples = run_task(tmp_path, tmp_path / "data", "live_bench_2409", answers, list(answers),
                                *judges(tmp_path))  # fmt: skip
    entries = results["breakdowns"]["subtask"]
    assert sorted(entries) == sorted(r["subtask"] for r in live_bench_rows())
    for subtask, entry in entries.items():
        assert entry["gpt4_eval_score,none"] == results[f"gpt4_eval_score_{subtask},none"]
        assert entry["n"] == sum(1 for s in samples if s["categories"]["subtask"] == subtask)


@pytest.mark.parametrize(("line", "error"), [
    ("breakdown: [category, category]", "each entry is a doc field name, each once"),
    ("breakdown: {category: 1}", "expected str or list"),
    ("breakdown: ['']", "each entry is a doc field name"),
])  # fmt: skip
def test_a_malformed_breakdown_is_one_error_naming_file_line_and_field(tmp_path: Path, line: str, error: str) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(Path(task_config("demo_objects").source_file).read_text() + f"{line}\n")
    lines = path.read_text().count("\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}:{lines}: field 'breakdown': {error}"):
        parse_task(path)


def test_a_breakdown_field_the_docs_lack_is_one_error_before_any_model_time(
    mmbench_run: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tmp, _, _ = mmbench_run
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "bad.yaml").write_text("task: mmbench_bad\nextends: mmbench_en_dev\nbreakdown: [category, L3-category]\n")
    out = tmp_path / "runs"
    rc = main(["run", "--model", "scripted_student", "--tasks", "mmbench_bad", "--include_path", str(tasks),
               "--data_dir", str(tmp / "data"), "--output_path", str(out), "--no_progress", *scripted_judge(tmp_path)])
    error = capsys.readouterr().err.strip()
    assert rc == 1 and "\n" not in error
    assert error.startswith(f"fastmmeval: error: {tasks / 'bad.yaml'}:3: field 'breakdown': 'L3-category' is not a "
                            "field of task mmbench_bad's docs (they have A, B, C, D, L2-category, ")
    assert not out.exists() or not any(out.iterdir())  # no run folder: the model was never loaded


def test_results_json_has_the_breakdowns_beside_the_task_s_keys(mmbench_run: Any) -> None:
    """The shape other tools read (`fastmmeval compare`): results[task]["breakdowns"][field][category]."""
    tmp, _, _ = mmbench_run
    run = max((tmp / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
    written = json.loads((run / "results.json").read_text())["results"]["mmbench_en_dev"]
    entry = written["breakdowns"]["L2-category"][COARSE]
    assert list(entry) == ["gpt_eval_score,none", "gpt_eval_score_stderr,none", "n"]
    assert entry["gpt_eval_score,none"] == pytest.approx(200 / 3) and entry["n"] == 3
    assert entry["gpt_eval_score_stderr,none"] > 0
