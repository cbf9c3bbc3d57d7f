"""LiveBench's task files (the hub months live_bench_2406 / 2407 / 2409 and a month built here) run on
fixtures in lmms-eval's LiveBench schema, graded by tests/judge_fixtures.py's scripted judge, which needs
the screenshots and lists their sizes in its reply; scores are checked against lmms-eval 0.7.3's own
livebench_process_results and livebench_aggregate_results (its OpenAI client answered by the same judge).

Schema: lmms-eval's LiveBench tool (`LiveBenchData.features`): id int32, images (a list of images),
website, question, answer, criteria, subtask, data_generator, checker, date_time, screen_shoter,
screen_size (strings), score int32, reason, scorer_name."""

from __future__ import annotations

import base64
import io
import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import datasets
import krippendorff
import pytest
from judge_fixtures import CALLS, JudgeArgs, scripted_reply
from peer_lmms_eval import lmms_eval_module
from PIL import Image
from task_fixtures import lmms_eval_prompt, lmms_eval_yaml, photo, prompt_text, run_task, save_split, task_config

from fastmmeval.errors import ConfigError
from fastmmeval.judge.judge import Judge, JudgeSpec
from fastmmeval.judge.pipeline import judge_calls
from fastmmeval.live.month_task import month_task_file, month_task_name
from fastmmeval.live.records import SUBTASKS
from fastmmeval.metrics import METRICS
from fastmmeval.metrics.base import JUDGE_VERDICT
from fastmmeval.protocol import Request, Response
from fastmmeval.tasks.catalog import Catalog
from fastmmeval.tasks.sources import DATA_DIR_ENV
from fastmmeval.tasks.task import Task

S = datasets.Value("string")
LIVE_BENCH = datasets.Features({
    "id": datasets.Value("int32"), "images": datasets.Sequence(datasets.Image()), "website": S, "question": S,
    "answer": S, "criteria": S, "subtask": S, "data_generator": S, "checker": S, "date_time": S,
    "screen_shoter": S, "screen_size": S, "score": datasets.Value("int32"), "reason": S, "scorer_name": S,
})  # fmt: skip
# (question, answer, criteria, screenshots); the subtasks are those of the month's lmms-eval list, in order.
DOCS = [
    ("What is the headline of the top story?", "Storm closes schools across the region",
     "10 points for the headline word for word; 5 for its gist; 0 otherwise.", 1),
    ("Why are the arrows in the markets panel red?", "Share prices fell after the rate decision",
     "10 points for naming the fall in prices and its cause; 5 for only one of them.", 2),
    ("Write a one-line caption for the main photo.", "A city braces for the storm",
     "10 points for a caption about the storm's arrival; 5 for any caption about the weather.", 1),
    ("Which section would you open to plan a weekend trip?", "The travel section",
     "10 points for the travel section; 0 otherwise.", 1),
]  # fmt: skip
# lmms-eval's subtask lists (the first four of utils.py's, for 2024-06 and 2024-07; utils_v2.py's, ours).
V1_SUBTASKS = ("Basic Understanding", "Contextual Analysis", "Deeper Implications", "Broader Implications")
MONTHS = {"live_bench_2406": ("utils", V1_SUBTASKS), "live_bench_2407": ("utils", V1_SUBTASKS),
          "live_bench_2409": ("utils_v2", SUBTASKS)}  # fmt: skip
OUTAGE, GARBLED = "(judge outage)", "(judge garbles)"


def live_bench_rows(subtasks: tuple[str, ...] = SUBTASKS) -> list[dict[str, Any]]:
    """One doc per subtask; the second has two screenshots."""
    return [
        {"id": i, "images": [photo(2 * i + k, 64 + 8 * k) for k in range(n)],
         "website": json.dumps({"url": f"https://news{i}.example/", "name": f"News {i}"}), "question": q,
         "answer": a, "criteria": c, "subtask": subtasks[i], "data_generator": "gpt-4o", "checker": "gpt-4o",
         "date_time": "2024-09-02 08:00:00", "screen_shoter": "single_screen", "screen_size": "1024 * 1024",
         "score": 8, "reason": "clear and answerable", "scorer_name": "claude-3-5-sonnet"}
        for i, (q, a, c, n) in enumerate(DOCS)
    ]  # fmt: skip


def sizes(row: dict[str, Any]) -> str:
    """The screenshot sizes as the scripted judge lists them."""
    return ", ".join(f"{i.width}x{i.height}" for i in row["images"])


class ScriptedOpenAI:
    """lmms-eval's OpenAI client (`client.chat.completions.create`) answered by the scripted judge: the
    message's image_url parts decoded, its text part the prompt; a failed call raises, as openai's does."""

    def __init__(self, args: JudgeArgs | None = None) -> None:
        self.args = args or JudgeArgs(fail_on=OUTAGE, garbage_on=GARBLED)
        self.sent: list[list[dict[str, Any]]] = []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(self, model: str, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        """The scripted judge's reply in openai's response shape."""
        self.sent.append(messages)
        [message] = messages
        images = [decoded(p) for p in message["content"] if p["type"] == "image_url"]
        [text] = [p["text"] for p in message["content"] if p["type"] == "text"]
        reply = scripted_reply(text, self.args, images)
        if reply is None:
            raise RuntimeError("scripted judge failure")
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=reply))])


def decoded(part: dict[str, Any]) -> Image.Image:
    """The image of an OpenAI image_url part (a base64 data URL)."""
    return Image.open(io.BytesIO(base64.b64decode(part["image_url"]["url"].split(",", 1)[1]))).convert("RGB")


def peer_patches(module: str, client: ScriptedOpenAI) -> dict[str, Any]:
    """What makes lmms-eval's LiveBench module `module` ask `client`: utils_v2 keeps one client,
    utils.py makes one per call."""
    if module == "utils_v2":
        return {"utils_v2.client": client}
    return {"utils.openai": SimpleNamespace(OpenAI=lambda **kwargs: client)}


@pytest.fixture(autouse=True)
def _openai_key_for_lmms_eval_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    """lmms-eval's utils_v2 builds an OpenAI client on import; it is never called."""
    monkeypatch.setenv("OPENAI_API_KEY", "unused-by-these-tests")


def judges(tmp_path: Path, *entries: dict[str, Any]) -> list[str]:
    """The CLI flags grading a run with the scripted judge(s) (default: one that fails and garbles on the markers)."""
    config = tmp_path / "judges.json"
    default = {"name": "scripted", "model": "scripted_judge", "args": {"fail_on": OUTAGE, "garbage_on": GARBLED}}
    config.write_text(json.dumps({"judges": list(entries) or [default]}))
    return ["--judge_config", str(config)]


def values(results: dict[str, Any]) -> dict[str, float]:
    """The metric values of a task's results, by lmms-eval-style key (without ',none')."""
    return {k.removesuffix(",none"): v for k, v in results.items() if k.endswith(",none") and "stderr" not in k}


def run_month(tmp_path: Path, task: str, rows: list[dict[str, Any]], answers: dict[int, str], *flags: str) -> Any:
    """(results, samples) of `task` run on `rows` saved as its hub split, each doc answered as scripted."""
    data = tmp_path / "data"
    save_split(data, task_config(task), rows, LIVE_BENCH)
    ids = [str(r["id"]) for r in rows]
    return run_task(tmp_path, data, task, {str(k): v for k, v in answers.items()}, ids, *(flags or judges(tmp_path)))


@pytest.mark.parametrize("task", list(MONTHS))
def test_a_hub_month_reads_lmms_eval_s_data_generation_settings_and_judge_prompt(task: str) -> None:
    config, reference = task_config(task), lmms_eval_yaml("live_bench", f"{task}.yaml")
    assert (config.dataset.path, config.dataset.name, config.split) == (
        reference["dataset_path"], reference["dataset_name"], reference["test_split"])  # fmt: skip
    kwargs = reference["generation_kwargs"]
    assert (config.generation.max_new_tokens, config.generation.temperature, config.generation.top_p) == (
        kwargs["max_new_tokens"], kwargs["temperature"], kwargs["top_p"]) == (1024, 0, 1.0)  # fmt: skip
    assert "until" not in kwargs and config.generation.stop == ()
    assert any("No stop string" in n for n in config.lmms_eval.notes)
    assert config.group == ("live",) and config.lmms_eval.task == reference["task"] == task
    [metric] = Task(config).metrics
    module = reference["process_results"].split(".")[0]
    assert module == MONTHS[task][0] and metric.judge == f"live_bench_{'v2' if module == 'utils_v2' else 'v1'}"


@pytest.mark.parametrize("task", list(MONTHS))
def test_a_hub_month_runs_by_name_and_its_judge_sees_every_screenshot(tmp_path: Path, task: str) -> None:
    rows = live_bench_rows(MONTHS[task][1])
    best, samples = run_month(tmp_path, task, rows, {r["id"]: r["answer"] for r in rows})
    half, _ = run_month(tmp_path, task, rows, {r["id"]: f"I believe: {r['answer'].lower()}." for r in rows})
    worst, _ = run_month(tmp_path, task, rows, {r["id"]: "I cannot tell." for r in rows})

    assert best["n_judged"] == {"gpt4_eval": 4} and best["failed_judgments"] == {"gpt4_eval": 0}
    subtask_keys = {f"gpt4_eval_score_{s}" for s in MONTHS[task][1]}
    assert set(values(best)) == {"gpt4_eval_score", *subtask_keys}  # lmms-eval's key and the per-subtask ones
    assert (set(values(best).values()), set(values(half).values()), set(values(worst).values())) == ({100}, {50}, {0})
    for sample, row in zip(samples, rows, strict=True):
        assert prompt_text(sample) == "<image>" * len(row["images"]) + row["question"]
        assert prompt_text(sample).replace("<image>", "") == lmms_eval_prompt("live_bench", f"{task}.yaml", row)
        [judgment] = sample["judgments"]["gpt4_eval"].values()
        assert judgment["value"] == 10.0 and f"screenshots: {sizes(row)}." in json.loads(judgment["raw"])["Explanation"]


class Recorder:
    """A judge backend that keeps the requests it is sent (and answers nothing readable)."""

    def __init__(self) -> None:
        self.sent: list[Request] = []

    def generate(self, requests: list[Request]) -> list[Response]:
        self.sent.extend(requests)
        return [Response(r.id, text="{}") for r in requests]


@pytest.mark.parametrize("task", list(MONTHS))
def test_the_judge_is_asked_exactly_what_lmms_eval_sends_its_gpt_and_reads_the_same_rating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task: str
) -> None:
    """lmms-eval's own livebench_process_results, its OpenAI client the scripted judge: one user message
    with the doc's screenshots (the same pixels, in order) and then our judge's text, word for word; the
    same reply gives the same rating."""
    module, subtasks = MONTHS[task]
    peer, client, recorder = lmms_eval_module(f"tasks.live_bench.{module}"), ScriptedOpenAI(), Recorder()
    for target, value in peer_patches(module, client).items():
        monkeypatch.setattr(peer, target.split(".")[1], value)
    judge = Judge(JudgeSpec("judge", "scripted_judge"), recorder)  # type: ignore[arg-type]
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    rows = live_bench_rows(subtasks)
    save_split(tmp_path, task_config(task), rows, LIVE_BENCH)
    month = Task(task_config(task))
    for ref, row in zip(month.doc_refs(), rows, strict=True):
        doc = month.doc(ref)
        request = month.request(doc, seed=0)
        answer = f"My answer: {row['answer']}"
        [(_, prompt, case)] = calls = judge_calls(month, doc, request, Response(request.id, text=answer))
        judge.ask(calls)
        theirs = peer.livebench_process_results(row, [answer])["gpt4_eval_score"]
        [message] = client.sent[-1]
        [turn] = recorder.sent[-1].messages
        assert prompt.id == f"live_bench_{'v2' if module == 'utils_v2' else 'v1'}@1" and turn.role == "user"
        assert [p["type"] for p in message["content"]] == ["image_url"] * len(row["images"]) + ["text"]
        assert [i.tobytes() for i in turn.images] == [decoded(p).tobytes() for p in message["content"][:-1]]
        assert [i.tobytes() for i in turn.images] == [i.convert("RGB").tobytes() for i in row["images"]]
        assert turn.content[-1].text == message["content"][-1]["text"] == prompt.render(case)
        reply = scripted_reply(prompt.render(case), client.args, turn.images)
        assert prompt.read(reply, case) == theirs["rating"] == 5  # the answer holds the reference


def test_scores_per_subtask_equal_lmms_eval_s_aggregation_and_an_unknown_subtask_is_a_category() -> None:
    """mean(rating / 10) x 100 overall, as livebench_aggregate_results returns it, and per subtask, as it
    prints it; a subtask outside its list is a category here and a KeyError there."""
    peer = lmms_eval_module("tasks.live_bench.utils_v2")
    metric = METRICS.get("live_bench")
    rated = [(SUBTASKS[0], 7), (SUBTASKS[0], 4), (SUBTASKS[1], 10), (SUBTASKS[3], 0), (SUBTASKS[2], 8.5)]
    items = [metric.score("an answer", ["ref"], {"subtask": s, JUDGE_VERDICT: r}) for s, r in rated]
    ours = metric.aggregate(items)
    assert ours["score"] == pytest.approx(peer.livebench_aggregate_results([{"rating": r, "subtask": s}
                                                                            for s, r in rated]))  # fmt: skip
    assert list(ours) == ["score", *(f"score_{s}" for s in SUBTASKS)]  # lmms-eval's order
    assert ours[f"score_{SUBTASKS[0]}"] == pytest.approx(55.0) and ours[f"score_{SUBTASKS[2]}"] == 85.0

    unknown = [*rated, ("Further Insights", 6)]
    with pytest.raises(KeyError, match="Further Insights"):
        peer.livebench_aggregate_results([{"rating": r, "subtask": s} for s, r in unknown])
    more = metric.aggregate([*items, metric.score("x", ["ref"], {"subtask": "Further Insights", JUDGE_VERDICT: 6})])
    assert list(more)[-1] == "score_Further Insights" and more["score_Further Insights"] == 60.0
    assert more["score"] == pytest.approx(100 * (7 + 4 + 10 + 0 + 8.5 + 6) / 60)


def test_a_string_rating_reads_as_its_number_where_lmms_eval_s_process_results_raises(tmp_path: Path) -> None:
    rows = live_bench_rows()
    results, samples = run_month(tmp_path, "live_bench_2409", rows, {r["id"]: f'(rate "{r["id"] + 6}")' for r in rows})
    replies = [json.loads(s["judgments"]["gpt4_eval"]["scripted"]["raw"]) for s in samples]
    assert [r["Rating"] for r in replies] == ["6", "7", "8", "9"]
    assert values(results)["gpt4_eval_score"] == pytest.approx(75.0)
    peer = lmms_eval_module("tasks.live_bench.utils_v2")
    client = ScriptedOpenAI()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(peer, "client", client)
        with pytest.raises(TypeError, match="'>=' not supported"):
            peer.livebench_process_results(rows[0], ['(rate "6")'])


def test_failed_and_unreadable_judgments_are_counted_beside_the_score_never_rated(tmp_path: Path) -> None:
    """A failed call, a reply without JSON and a Rating of 12 are left out and counted; the score is
    the mean over the other docs (never a -1 or a 0 inside it)."""
    rows = live_bench_rows()
    answers = {0: f"{rows[0]['answer']} {OUTAGE}", 1: GARBLED, 2: "(rate 12)", 3: "(rate 7)"}
    results, samples = run_month(tmp_path, "live_bench_2409", rows, answers)
    assert results["failed_judgments"] == {"gpt4_eval": 3} and results["n_judged"] == {"gpt4_eval": 1}
    assert results["n_failed"] == 0
    assert values(results) == {"gpt4_eval_score": 70.0, f"gpt4_eval_score_{SUBTASKS[3]}": 70.0}
    errors = [s["judgments"]["gpt4_eval"]["scripted"]["error"] for s in samples]
    assert "scripted judge failure" in errors[0] and "no JSON object" in errors[1] and "outside [0, 10]" in errors[2]
    assert errors[3] is None and [s["metrics"]["gpt4_eval"] for s in samples][:3] == [None] * 3


def test_several_judges_grade_a_month_and_their_agreement_is_reported(tmp_path: Path) -> None:
    rows = live_bench_rows()
    answers = {0: rows[0]["answer"], 1: f"It is: {rows[1]['answer']}", 2: "No idea.", 3: rows[3]["answer"]}
    harsh_judge = {"name": "harsh", "model": "scripted_judge", "args": {"name": "harsh", "harsh": "true"}}
    flags = judges(tmp_path, {"name": "fair", "model": "scripted_judge"}, harsh_judge)
    results, _ = run_month(tmp_path, "live_bench_2409", rows, answers, *flags)
    fair, harsh = [10.0, 5.0, 0.0, 10.0], [5.0, 2.0, 0.0, 5.0]
    agree = results["judge_agreement"]["gpt4_eval"]
    assert (agree["prompt"], agree["level"], agree["judges"], agree["n_items"]) == (
        "live_bench_v2@1", "interval", ["fair", "harsh"], 4)  # fmt: skip
    assert agree["krippendorff_alpha"] == pytest.approx(
        krippendorff.alpha([fair, harsh], level_of_measurement="interval"))
    assert values(results)["gpt4_eval_score"] == pytest.approx(62.5)  # the first judge decides


def test_a_judge_served_over_http_gets_the_screenshots_and_its_cache_tells_screenshots_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--judge_model openai` against `fastmmeval serve` over the scripted judge: the screenshots travel as
    image_url parts; a second run is answered from the response cache, and the same text with other
    screenshots is asked again."""
    from fastmmeval.models import MODELS
    from fastmmeval.serve.app import start_server

    monkeypatch.setenv("FMM_JUDGE_KEY", "not-a-real-key")
    rows = live_bench_rows()
    others = [{**r, "images": [photo(7 + k, 40) for k in range(len(r["images"]))]} for r in rows]
    answers = {r["id"]: r["answer"] for r in rows}
    served = MODELS.get("scripted_judge").from_args({"name": "served"})
    with start_server(served) as server:
        args = f"base_url={server.url},model=scripted_judge,api_key_env=FMM_JUDGE_KEY,cache_dir={tmp_path / 'cache'}"
        flags = ["--judge_model", "openai", "--judge_args", args]
        first, samples = run_month(tmp_path / "first", "live_bench_2409", rows, answers, *flags)
        asked = CALLS["scripted_judge:served"]
        again, _ = run_month(tmp_path / "again", "live_bench_2409", rows, answers, *flags)
        assert CALLS["scripted_judge:served"] == asked  # every judgment from the cache
        other, _ = run_month(tmp_path / "other", "live_bench_2409", others, answers, *flags)
        assert CALLS["scripted_judge:served"] == asked + len(rows)  # other screenshots: asked again
    assert [values(r)["gpt4_eval_score"] for r in (first, again, other)] == [100, 100, 100]
    for sample, row in zip(samples, rows, strict=True):
        assert f"screenshots: {sizes(row)}." in sample["judgments"]["gpt4_eval"]["judge"]["raw"]


def built_month(folder: Path, month: str) -> Path:
    """A month as `live export` writes it: test.parquet in lmms-eval's schema, its save_to_disk copy
    under hf/, and the task file beside them."""
    folder.mkdir(parents=True)
    data = datasets.Dataset.from_list(live_bench_rows(), features=LIVE_BENCH)
    data.to_parquet(str(folder / "test.parquet"))
    data.save_to_disk(str(folder / "hf"))
    (folder / f"{month_task_name(month)}.yaml").write_text(month_task_file(month, folder))
    return folder


def test_a_built_month_runs_from_its_folder_with_include_path_and_the_folder_can_move(tmp_path: Path) -> None:
    """`fastmmeval run --include_path <folder> --tasks live_bench_2026_12`: LiveBench's protocol (the
    template 2024-09 extends) over the month's parquet, named relative to the task file."""
    folder = built_month(tmp_path / "months" / "2026-12", "2026-12")
    built = Catalog([folder]).tasks.get("live_bench_2026_12")
    hub = task_config("live_bench_2409")
    assert (built.doc_to_messages, built.generation, built.metrics, built.group) == (
        hub.doc_to_messages, hub.generation, hub.metrics, hub.group)  # fmt: skip
    assert built.docs == 4 and built.lmms_eval is None
    rows = live_bench_rows()
    answers = {str(r["id"]): r["answer"] if r["id"] % 2 else "No." for r in rows}
    moved = tmp_path / "elsewhere" / "2026-12"
    for where in (folder, moved):
        if where == moved:
            shutil.move(folder, moved)
        results, samples = run_task(tmp_path, tmp_path / "no_data", "live_bench_2026_12", answers, list(answers),
                                    "--include_path", str(where.parent), *judges(tmp_path))  # fmt: skip
        per_subtask = {f"gpt4_eval_score_{s}": 100.0 * (i % 2) for i, s in enumerate(SUBTASKS)}
        assert values(results) == {"gpt4_eval_score": 50.0, **per_subtask}
        assert results["failed_judgments"] == {"gpt4_eval": 0} and results["n"] == 4
        assert f"screenshots: {sizes(rows[1])}." in samples[1]["judgments"]["gpt4_eval"]["scripted"]["raw"]


def test_a_month_task_file_names_its_month_and_needs_the_month_s_parquet(tmp_path: Path) -> None:
    assert month_task_name("2026-12") == "live_bench_2026_12"
    for bad in ("2026-13", "202612", "26-12"):
        with pytest.raises(ConfigError, match="expected YYYY-MM"):
            month_task_name(bad)
    with pytest.raises(ConfigError, match="no readable parquet file for month 2026-12"):
        month_task_file("2026-12", tmp_path)
