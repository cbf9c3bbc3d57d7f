"""Judged tasks end to end: `fastmmeval run` with the builtin `demo_judged` tasks, a scripted
student and scripted judges (deterministic, counting their calls, failing on demand)."""

from __future__ import annotations

import json
from pathlib import Path

import judge_fixtures
import krippendorff
import pytest
from judge_fixtures import CALLS, TIMELINE, reset

from fastmmeval.cli import main

DIGITS = "demo_digits_judged"
OBJECTS = "demo_objects_judged"


def _run(tmp_path: Path, answers: dict[str, str], *flags: str, tasks: str = DIGITS, limit: int = 8) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    table = tmp_path / "answers.json"
    table.write_text(json.dumps(answers))
    out = tmp_path / "runs"
    argv = ["run", "--model", "scripted_student", "--model_args", f"answers={table}", "--tasks", tasks,
            "--limit", str(limit), "--output_path", str(out), "--no_progress", *flags]  # fmt: skip
    assert main(argv) == 0
    return next(out.iterdir())


def _samples(run: Path, task: str) -> dict[str, dict]:
    return {s["doc_id"]: s for s in map(json.loads, (run / "samples" / f"{task}.jsonl").read_text().splitlines())}


def _digit_ids(n: int) -> list[str]:
    from fastmmeval.tasks.catalog import Catalog
    from fastmmeval.tasks.task import Task

    task = Task(Catalog().tasks.get(DIGITS))
    return [(r.id, task.doc(r).fields["answer"]) for r in task.doc_refs(n)]


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    assert judge_fixtures.MODELS.get("scripted_judge")  # registered by the import above
    reset()


def test_judge_metrics_score_judged_docs_and_count_failed_judgments_beside_them(tmp_path: Path) -> None:
    docs = _digit_ids(8)
    answers = {f"{DIGITS}/{d}": a for d, a in docs[:5]}  # five right
    answers[f"{DIGITS}/{docs[5][0]}"] = "BOOM"  # the judge's backend fails on this one
    answers[f"{DIGITS}/{docs[6][0]}"] = "???"  # the judge's reply is unreadable
    judge = ["--judge_model", "scripted_judge", "--judge_args", "fail_on=BOOM,garbage_on=???,damage=fenced"]
    run = _run(tmp_path, answers, *judge)
    result = json.loads((run / "results.json").read_text())["results"][DIGITS]
    assert result["failed_judgments"] == {"judge_score": 2, "mmvet": 2, "llava_w": 2}
    assert result["n_judged"] == {"judge_score": 6, "mmvet": 6, "llava_w": 6}
    assert result["n_failed"] == 0 and result["n_scored"] == 8
    # Scores are over the six judged docs (five right, one "I don't know"), never with -1 or 0 for failures.
    assert result["metrics"]["judge_score"]["value"] == pytest.approx(100 * 5 / 6)
    assert result["metrics"]["mmvet"]["value"] == pytest.approx(100 * 5 / 6)
    assert result["metrics"]["llava_w"]["value"] == pytest.approx(100 * (5 * 8 + 2) / (6 * 8))
    assert CALLS["scripted_judge:judge"] == 8 * 3
    samples = _samples(run, DIGITS)
    boom = samples[docs[5][0]]
    assert boom["metrics"]["judge_score"] is None
    assert "scripted judge failure" in boom["judgments"]["judge_score"]["judge"]["error"]
    right = samples[docs[0][0]]["judgments"]["judge_score"]["judge"]
    assert right["prompt"] == "judge_score@1" and right["raw"].startswith("Here is my grade") and right["value"] == 10


def test_judge_assisted_extraction_goes_rules_then_judge_then_unparsed(tmp_path: Path) -> None:
    answers = {
        f"{OBJECTS}/chelsea_subject": "Cat.",  # the rules cannot read it; the judge matches "A cat" (D)
        f"{OBJECTS}/chelsea_animal": "A",  # the rules read it: no judge call
        f"{OBJECTS}/horse_animal": "no idea at all",  # the judge matches none: unparsed, scored wrong
        f"{OBJECTS}/horse_color": "dark BOOM",  # the judge fails: left out, counted
    }
    judge = ["--judge_model", "scripted_judge", "--judge_args", "fail_on=BOOM"]
    run = _run(tmp_path, answers, *judge, tasks=OBJECTS, limit=4)
    samples = _samples(run, OBJECTS)
    assert [samples[d]["extract_rule"] for d in ("chelsea_subject", "chelsea_animal", "horse_animal", "horse_color")] \
        == ["judge", "letter", "unparsed", "judge_failed"]
    assert samples["chelsea_subject"]["extracted"] == "D"
    assert samples["chelsea_subject"]["judgments"]["extract"]["judge"]["raw"] == '{"option": "D"}'
    assert not samples["chelsea_animal"]["judgments"]
    assert samples["horse_color"]["metrics"]["accuracy"] is None
    result = json.loads((run / "results.json").read_text())["results"][OBJECTS]
    assert result["failed_judgments"] == {"extract": 1}
    assert result["metrics"]["accuracy"]["value"] == pytest.approx(2 / 3)  # judge's D right, A right, unparsed wrong
    assert CALLS["scripted_judge:judge"] == 3


def test_judging_overlaps_inference(tmp_path: Path) -> None:
    docs = _digit_ids(6)
    answers = {f"{DIGITS}/{d}": a for d, a in docs}
    _run(tmp_path, answers, "--model_args", "delay_s=0.1", "--judge_model", "scripted_judge",
         "--judge_args", "delay_s=0.1", limit=6)  # fmt: skip
    student = [t for t in TIMELINE if t[0] == "scripted_student"]
    judge = [t for t in TIMELINE if t[0] == "scripted_judge"]
    assert len(student) == 6 and CALLS["scripted_judge:judge"] == 6 * 3
    # The first doc is judged while the model still answers later docs.
    assert judge[0][2] < student[-1][3]


def test_docs_answered_while_the_judge_is_busy_are_judged_together(tmp_path: Path) -> None:
    docs = _digit_ids(6)
    _run(tmp_path, {f"{DIGITS}/{d}": a for d, a in docs}, "--judge_model", "scripted_judge",
         "--judge_args", "delay_s=0.3", limit=6)  # fmt: skip
    calls = [t for t in TIMELINE if t[0] == "scripted_judge"]
    assert CALLS["scripted_judge:judge"] == 6 * 3
    assert len(calls) < 6  # one backend call grades every doc that arrived meanwhile, concurrently


def test_a_judged_task_without_a_judge_fails_in_one_line_before_any_model_call(tmp_path: Path, capsys) -> None:
    table = tmp_path / "answers.json"
    table.write_text("{}")
    argv = ["run", "--model", "scripted_student", "--model_args", f"answers={table}", "--tasks", DIGITS,
            "--output_path", str(tmp_path / "runs"), "--no_progress"]  # fmt: skip
    assert main(argv) == 1
    assert "need a judge: pass --judge_model" in capsys.readouterr().err
    assert not CALLS


def test_several_judges_score_one_run_and_their_agreement_is_reported(tmp_path: Path) -> None:
    docs = _digit_ids(10)
    answers = {f"{DIGITS}/{d}": a for d, a in docs[:6]}
    config = tmp_path / "judges.json"
    config.write_text(json.dumps({"judges": [
        {"name": "fair", "model": "scripted_judge", "args": {"damage": "strings"}},
        {"name": "harsh", "model": "scripted_judge", "args": {"name": "harsh", "harsh": "true", "damage": "prose"}},
    ]}))  # fmt: skip
    run = _run(tmp_path, answers, "--judge_config", str(config), limit=10)
    result = json.loads((run / "results.json").read_text())["results"][DIGITS]
    assert result["metrics"]["judge_score"]["value"] == pytest.approx(60.0)  # the first judge decides
    agree = result["judge_agreement"]["judge_score"]
    assert agree["judges"] == ["fair", "harsh"] and agree["n_items"] == 10
    fair = [10.0] * 6 + [0.0] * 4
    harsh = [5.0] * 6 + [0.0] * 4
    peer = krippendorff.alpha([fair, harsh], level_of_measurement="interval")
    assert agree["krippendorff_alpha"] == pytest.approx(peer)
    assert CALLS["scripted_judge:judge"] == 30 and CALLS["scripted_judge:harsh"] == 30


def test_a_resumed_run_does_not_judge_finished_docs_again(tmp_path: Path) -> None:
    docs = _digit_ids(6)
    answers = {f"{DIGITS}/{d}": a for d, a in docs}
    run = _run(tmp_path, answers, "--judge_model", "scripted_judge", limit=6)
    lines = (run / "samples" / f"{DIGITS}.jsonl").read_text().splitlines(keepends=True)
    (run / "samples" / f"{DIGITS}.jsonl").write_text("".join(lines[:4]))  # as if killed after four docs
    reset()
    table = tmp_path / "answers.json"
    argv = ["run", "--model", "scripted_student", "--model_args", f"answers={table}", "--tasks", DIGITS,
            "--limit", "6", "--output_path", str(tmp_path / "runs"), "--no_progress",
            "--judge_model", "scripted_judge", "--resume"]  # fmt: skip
    assert main(argv) == 0
    assert CALLS["scripted_judge:judge"] == 2 * 3 and CALLS["scripted_student:student"] == 2
    result = json.loads((run / "results.json").read_text())["results"][DIGITS]
    assert result["metrics"]["judge_score"]["value"] == pytest.approx(100.0) and result["n"] == 6


def test_judge_agree_reports_the_agreement_of_a_finished_run(tmp_path: Path, capsys) -> None:
    docs = _digit_ids(4)
    config = tmp_path / "judges.yaml"
    config.write_text("judges: [{name: a, model: scripted_judge}, {name: b, model: scripted_judge, args: {name: b}}]\n")
    run = _run(tmp_path, {f"{DIGITS}/{d}": a for d, a in docs[:2]}, "--judge_config", str(config), limit=4)
    capsys.readouterr()
    assert main(["judge", "agree", str(run), "--judges", "a,b"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report[DIGITS]["mmvet"] == {
        "prompt": "mmvet@1", "level": "interval", "judges": ["a", "b"], "n_items": 4, "krippendorff_alpha": 1.0,
    }  # fmt: skip


def test_a_judge_served_over_http_through_the_openai_backend(tmp_path: Path, monkeypatch) -> None:
    """The judge as a deployment would run it: `--judge_model openai` against an OpenAI-compatible
    server (our `serve`, here over the scripted judge); a second run is answered from the cache."""
    from fastmmeval.models import MODELS
    from fastmmeval.serve.app import start_server

    monkeypatch.setenv("FMM_JUDGE_KEY", "not-a-real-key")
    docs = _digit_ids(6)
    answers = {f"{DIGITS}/{d}": a for d, a in docs[:4]}
    served = MODELS.get("scripted_judge").from_args({"name": "served", "damage": "fenced"})
    with start_server(served) as server:
        cache = tmp_path / "cache"
        judge_args = f"base_url={server.url},model=scripted_judge,api_key_env=FMM_JUDGE_KEY,cache_dir={cache}"
        flags = ["--judge_model", "openai", "--judge_args", judge_args]
        first = _run(tmp_path / "first", answers, *flags, limit=6)
        asked = CALLS["scripted_judge:served"]
        assert 0 < asked <= 6 * 3  # identical judge prompts (same digit, same answer) are asked once
        again = _run(tmp_path / "again", answers, *flags, limit=6)
        assert CALLS["scripted_judge:served"] == asked  # every judgment came from the response cache
    for run in (first, again):
        result = json.loads((run / "results.json").read_text())["results"][DIGITS]
        assert result["metrics"]["judge_score"]["value"] == pytest.approx(100 * 4 / 6)
        assert result["failed_judgments"] == {"judge_score": 0, "mmvet": 0, "llava_w": 0}
    assert json.loads((first / "results.json").read_text())["judge_usage"]["judge"]
    assert "not-a-real-key" not in "".join(p.read_text() for p in first.rglob("*.json*"))


def test_judge_failures_behind_a_faulty_network_are_counted_never_scored(tmp_path: Path, monkeypatch) -> None:
    """A judge behind the fault proxy (500s and malformed JSON, no retries): every injected fault is
    one failed judgment, kept with its reason; the scores are over the judgments that came back."""
    from fastmmeval.models import MODELS
    from fastmmeval.serve.app import start_server
    from fastmmeval.testing.faults import start_proxy

    monkeypatch.setenv("FMM_JUDGE_KEY", "unused")
    docs = _digit_ids(8)
    served = MODELS.get("scripted_judge").from_args({"name": "served"})
    with start_server(served) as server, start_proxy(server.url, rate_500=0.3, rate_malformed=0.2, seed=3) as proxy:
        judge_args = f"base_url={proxy.url},model=scripted_judge,api_key_env=FMM_JUDGE_KEY,cache_dir=off,max_retries=0"
        answers = {f"{DIGITS}/{d}": a for d, a in docs}
        run = _run(tmp_path, answers, "--judge_model", "openai", "--judge_args", judge_args)
        injected = sum(proxy.stats.faults.values())
    result = json.loads((run / "results.json").read_text())["results"][DIGITS]
    assert injected > 0 and sum(result["failed_judgments"].values()) == injected
    assert all(result["n_judged"][use] + result["failed_judgments"][use] == 8 for use in result["n_judged"])
    assert result["n_failed"] == 0
    if result["n_judged"]["judge_score"]:
        assert result["metrics"]["judge_score"]["value"] == pytest.approx(100.0)  # every answer was right
    reasons = [r["judge"]["error"] for s in _samples(run, DIGITS).values() for r in s["judgments"].values()]
    errors = [e for e in reasons if e is not None]
    assert len(errors) == injected and all(e.startswith("judge 'judge': openai") for e in errors)
