"""`fastmmeval evolve` from the command line: `run` writes the new version and prints how to evaluate
it, `fastmmeval run` evaluates it with MMBench's protocol, `review` writes another sample's sheet and
tallies a saved review; bad flags are one line."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from evolve_benchmarks import save_mmbench_dev
from evolve_images import write_folder
from evolve_llm import KEY_ENV, EvolveLLM
from task_fixtures import run_task

from fastmmeval.cli import main

COUNTS = {"image_scene": 2, "ocr": 2}
TASK = "mmbench_en_dev_live_v1"


def flags(llm: EvolveLLM, tmp: Path) -> list[str]:
    args = ",".join(f"{k}={v}" for k, v in llm.role_args().items())
    return ["--tasks", "mmbench_en_dev", "--out", str(tmp / "update"), "--data_dir", str(tmp / "data"),
            "--writer", "openai", "--writer_args", args, "--images_dir", str(tmp / "images"), "--k", "4",
            "--retrieve", "4", "--images", "3", "--queries", "1", "--no_progress"]


def test_run_then_evaluate_then_review(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv(KEY_ENV, "test-key")
    save_mmbench_dev(tmp_path / "data", COUNTS)
    write_folder(tmp_path / "images", 10, topics=sorted(COUNTS))
    with EvolveLLM() as llm:
        assert main(["evolve", "run", *flags(llm, tmp_path)]) == 0
    out = capsys.readouterr().out
    version = tmp_path / "update" / "v1"
    assert f"fastmmeval run --include_path {version} --tasks mmbench_en_dev_live_v1" in out
    assert (tmp_path / "update" / "review_v1.html").is_file()

    # the version runs under the original's protocol: answering every rotation right scores 100 under
    # CircularEval, one rotation wrong takes its question's point away
    table = pq.read_table(version / "dev.parquet").select(["index", "answer"]).to_pylist()
    assert json.loads((version / "manifest.json").read_text())["export"]["questions"] == 6
    answers = {str(r["index"]): r["answer"] for r in table}
    judge = tmp_path / "judges.json"  # MMBench's judge reads what its rules cannot: never needed here
    judge.write_text(json.dumps({"judges": [{"name": "judge", "model": "scripted_judge", "args": {}}]}))
    extra = ("--include_path", str(version), "--judge_config", str(judge))
    results, _ = run_task(tmp_path, tmp_path / "data", TASK, answers, list(answers), *extra)
    assert results["gpt_eval_score,none"] == 100.0
    first = min(answers)
    answers[first] = "B" if answers[first] == "A" else "A"
    results, _ = run_task(tmp_path, tmp_path / "data", TASK, answers, list(answers), *extra)
    assert results["gpt_eval_score,none"] == pytest.approx(100 * 5 / 6)

    assert main(["evolve", "review", "--out", str(tmp_path / "update"), "--seed", "2"]) == 0
    assert (tmp_path / "update" / "review_v1_seed2.html").is_file()
    decisions = tmp_path / "decisions.json"
    decisions.write_text(json.dumps({"format": "fastmmeval.evolve-review", "task": "mmbench_en_dev_live_v1",
                                     "seed": 0, "fraction": 0.1,
                                     "items": {"a": {"task": "ocr", "decision": "correct"},
                                               "b": {"task": "image_scene", "decision": "incorrect"},
                                               "c": {"task": "ocr", "decision": "correct"}}}))
    capsys.readouterr()
    assert main(["evolve", "review", "--out", str(tmp_path / "update"), "--decisions", str(decisions)]) == 0
    table = capsys.readouterr().out
    assert "66.67%" in table and "100.00%" in table and "0.00%" in table


def test_bad_flags_are_one_line(tmp_path: Path, capsys) -> None:
    base = ["evolve", "run", "--tasks", "mmbench_en_dev", "--out", str(tmp_path / "u"), "--writer", "openai"]
    assert main([*base, "--tool_weights", "detect"]) != 0
    assert "--tool_weights 'detect': expected TOOL=DIR" in capsys.readouterr().err
    assert main(base) != 0
    assert "no image source" in capsys.readouterr().err
