"""`fastmmeval run`'s lmms-eval habits: --gen_kwargs, --system_instruction, --config, the efficiency numbers
in results.json, and the end-of-run hooks (report, W&B / TensorBoard, --compare), on the text-only qa tasks."""

from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from cli_fixtures import run_argv, write_tasks

import fastmmeval.report
from fastmmeval.cli import main
from fastmmeval.errors import ConfigError
from fastmmeval.models import MODELS, Model
from fastmmeval.protocol import Request, Response
from fastmmeval.tasks import resolve
from fastmmeval.tasks.overrides import parse_gen_kwargs


@dataclass
class CountingArgs:
    pass


class CountingModel(Model):
    """Answers "3" to every request, records what it was asked and reports 5 prompt and 1 generated token."""

    name = "counting_model"
    Args = CountingArgs
    seen: ClassVar[list[Request]] = []

    def __init__(self, args: Any) -> None:
        self.args = args

    def generate(self, requests: list[Request]) -> list[Response]:
        self.seen.extend(requests)
        return [Response(r.id, text="3", usage={"prompt_tokens": 5, "completion_tokens": 1}) for r in requests]

    def loglikelihood(self, requests: list[Request]) -> list[Response]:
        raise NotImplementedError

    def fingerprint(self) -> dict[str, Any]:
        return {"counting": True}


MODELS.add(CountingModel.name, CountingModel)


@pytest.fixture(autouse=True)
def report_calls(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The report writer stubbed: the run folders it was asked for."""
    calls: list[Path] = []

    def write_run_report(root: Path) -> Path:
        calls.append(root)
        return root / "report.html"

    monkeypatch.setattr(fastmmeval.report, "write_run_report", write_run_report, raising=False)
    CountingModel.seen.clear()
    return calls


def counting_run(tmp_path: Path, *extra: str) -> list[str]:
    argv = run_argv(write_tasks(tmp_path / "tasks", n_docs=4), tmp_path / "runs", *extra)
    return [*argv, "--model", "counting_model", "--model_args", ""]


def only_run(folder: Path) -> Path:
    [run] = folder.iterdir()
    return run


def test_gen_kwargs_reach_the_model_and_change_the_fingerprint(tmp_path: Path) -> None:
    assert main(counting_run(tmp_path, "--tasks", "qa_a", "--output_path", str(tmp_path / "plain"))) == 0
    assert {r.generation.max_new_tokens for r in CountingModel.seen} == {64}
    CountingModel.seen.clear()
    argv = counting_run(tmp_path, "--tasks", "qa_a", "--gen_kwargs", "max_new_tokens=7,temperature=0.5,until=END")
    assert main(argv) == 0
    assert {(r.generation.max_new_tokens, r.generation.temperature, r.generation.stop)
            for r in CountingModel.seen} == {(7, 0.5, ("END",))}
    manifest = json.loads((only_run(tmp_path / "runs") / "manifest.json").read_text())
    plain = json.loads((only_run(tmp_path / "plain") / "manifest.json").read_text())
    assert manifest["config"]["gen_kwargs"] == {"max_new_tokens": 7, "temperature": 0.5, "stop": "END"}
    assert manifest["task_fingerprints"]["qa_a"] != plain["task_fingerprints"]["qa_a"]
    # --resume finds the run only with the same settings (written another way: 0.50 is 0.5)
    CountingModel.seen.clear()
    same = counting_run(tmp_path, "--tasks", "qa_a", "--gen_kwargs", "temperature=0.50,max_new_tokens=7,stop=END")
    assert main([*same, "--resume"]) == 0 and CountingModel.seen == [] and len(list((tmp_path / "runs").iterdir())) == 1


@pytest.mark.parametrize(("text", "message"), [
    ("beams=4", "unknown setting 'beams=4'"),
    ("max_new_tokens=0", "max_new_tokens must be >= 1, got '0'"),
    ("temperature=warm", "temperature must be a number, got 'warm'"),
    ("top_p", "unknown setting 'top_p'"),
])
def test_a_bad_gen_kwarg_is_one_error_line(
    text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(counting_run(tmp_path, "--gen_kwargs", text)) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("fastmmeval: error: --gen_kwargs: ") and message in line
    assert not (tmp_path / "runs").exists()


def test_gen_kwargs_leave_a_task_asked_by_likelihood_alone() -> None:
    plain = {t.name: t.config.fingerprint() for t in resolve(["demo"])}
    changed = {t.name: t.config for t in resolve(["demo"], gen_kwargs=parse_gen_kwargs("max_new_tokens=3"))}
    assert changed["demo_digits"].generation.max_new_tokens == 3
    assert changed["demo_digits"].fingerprint() != plain["demo_digits"]
    assert changed["demo_objects"].mc_mode == "ppl" and changed["demo_objects"].fingerprint() == plain["demo_objects"]


def test_the_system_instruction_comes_first_and_is_fingerprinted(tmp_path: Path) -> None:
    argv = counting_run(tmp_path, "--tasks", "qa_a", "--system_instruction", "Answer in {one} word.")
    assert main(argv) == 0
    for request in CountingModel.seen:
        assert [m.role for m in request.messages] == ["system", "user"]
        assert request.messages[0].text == "Answer in {one} word."
    config = resolve(["qa_a"], [tmp_path / "tasks"], system_instruction="Answer in {one} word.")[0].config
    assert config.fingerprint() != resolve(["qa_a"], [tmp_path / "tasks"])[0].config.fingerprint()
    manifest = json.loads((only_run(tmp_path / "runs") / "manifest.json").read_text())
    assert manifest["config"]["system_instruction"] == "Answer in {one} word."


def test_a_config_file_gives_defaults_and_the_command_line_wins(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks", n_docs=4)
    config = tmp_path / "run.yaml"
    config.write_text(f"model: counting_model\ntasks: [qa_a, qa_b]\ninclude_path: [{tasks}]\nlimit: 3\n"
                      f"output_path: {tmp_path / 'runs'}\nno_progress: true\nbootstrap_iters: 0\n"
                      "gen_kwargs: {max_new_tokens: 9}\n")
    assert main(["run", "--config", str(config), "--limit", "2"]) == 0
    assert len(CountingModel.seen) == 4 and {r.generation.max_new_tokens for r in CountingModel.seen} == {9}
    flags = json.loads((only_run(tmp_path / "runs") / "manifest.json").read_text())["flags"]
    assert flags["config"] == str(config) and flags["limit"] == 2 and flags["tasks"] == "qa_a,qa_b"
    assert flags["model"] == "counting_model" and flags["gen_kwargs"] == "max_new_tokens=9"
    assert flags["include_path"] == [str(tasks)] and flags["no_report"] is False and flags["compare"] is None


@pytest.mark.parametrize(("text", "message"), [
    ("model: counting_model\nbatchsize: 2\n", "unknown key 'batchsize'"),
    ("model: counting_model\nlimit: none\n", "limit: expected an integer, got 'none'"),
    ("model: counting_model\nno_progress: yes please\n", "no_progress: expected true or false"),
    ("- model\n", "expected a mapping of run flag names"),
])
def test_a_bad_config_file_is_one_error_line_naming_the_file(
    text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    assert main(["run", "--config", str(config), "--tasks", "qa"]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"fastmmeval: error: --config {config}: ") and message in line


def test_results_hold_each_tasks_timing_and_tokens(tmp_path: Path) -> None:
    assert main(counting_run(tmp_path)) == 0
    results = json.loads((only_run(tmp_path / "runs") / "results.json").read_text())["results"]
    for r in results.values():
        timing, tokens = r["timing"], r["tokens"]
        assert set(timing) == {"wall_s", "prepare_s", "model_s", "judge_s", "score_s", "docs_per_s"}
        assert timing["wall_s"] >= max(timing["model_s"], timing["score_s"]) and timing["docs_per_s"] > 0
        assert (tokens["prompt"], tokens["generated"]) == (20, 4)
        assert tokens["prompt_per_s"] is None or tokens["prompt_per_s"] > 0


def test_tokens_a_backend_does_not_count_are_unknown_not_zero(tmp_path: Path) -> None:
    assert main(run_argv(write_tasks(tmp_path / "tasks", n_docs=2), tmp_path / "runs")) == 0  # scripted_student
    results = json.loads((only_run(tmp_path / "runs") / "results.json").read_text())["results"]
    assert results["qa_a"]["tokens"] == {"prompt": None, "generated": None, "prompt_per_s": None,
                                         "generated_per_s": None}


def test_a_run_from_before_the_new_settings_resumes(tmp_path: Path) -> None:
    assert main(counting_run(tmp_path, "--limit", "2")) == 0
    manifest_path = only_run(tmp_path / "runs") / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for key in ("gen_kwargs", "system_instruction"):
        del manifest["config"][key]
    manifest_path.write_text(json.dumps(manifest))
    CountingModel.seen.clear()
    assert main(counting_run(tmp_path, "--limit", "2", "--resume")) == 0
    assert CountingModel.seen == [] and len(list((tmp_path / "runs").iterdir())) == 1  # found: nothing left to ask


def test_the_end_of_run_hooks_run_after_results_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], report_calls: list[Path]
) -> None:
    logged: list[dict[str, Any]] = []

    def log_run(root: Path, *, wandb_args: dict[str, str] | None, tensorboard_dir: Path | None) -> None:
        assert (root / "results.json").exists()
        logged.append({"root": root, "wandb_args": wandb_args, "tensorboard_dir": tensorboard_dir})

    def terminal_lines(root: Path, other: Path) -> list[str]:
        return [f"qa_a: {root.name} vs {other.name}: not significant"]

    loggers = types.SimpleNamespace(log_run=log_run, parse_wandb_args=lambda text: dict(
        item.split("=", 1) for item in text.split(",")))
    monkeypatch.setitem(sys.modules, "fastmmeval.report.loggers", loggers)
    comparison = types.SimpleNamespace(terminal_lines=terminal_lines)
    monkeypatch.setitem(sys.modules, "fastmmeval.report.comparison", comparison)
    earlier = tmp_path / "earlier"
    argv = counting_run(tmp_path, "--wandb_args", "project=p,name=n", "--tensorboard", str(tmp_path / "tb"),
                        "--compare", str(earlier))
    assert main(argv) == 0
    run = only_run(tmp_path / "runs")
    assert logged == [{"root": run, "wandb_args": {"project": "p", "name": "n"}, "tensorboard_dir": tmp_path / "tb"}]
    assert report_calls == [run]
    out = capsys.readouterr().out
    assert out.index("fastmmeval results") < out.index(f"qa_a: {run.name} vs earlier: not significant")
    assert out.index("run folder:") < out.index(f"report: {run / 'report.html'}")
    flags = json.loads((run / "manifest.json").read_text())["flags"]
    assert flags["wandb_args"] == "project=p,name=n" and flags["compare"] == str(earlier)
    config = json.loads((run / "manifest.json").read_text())["config"]
    assert not {"wandb_args", "tensorboard", "compare", "no_report"} & set(config)


def test_no_report_skips_the_report_and_no_logger_is_imported_unasked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], report_calls: list[Path]
) -> None:
    monkeypatch.setitem(sys.modules, "fastmmeval.report.loggers", None)  # importing it would fail
    assert main(counting_run(tmp_path, "--no_report")) == 0
    assert report_calls == [] and "report:" not in capsys.readouterr().out


def test_parse_gen_kwargs_types_each_value() -> None:
    assert parse_gen_kwargs("max_new_tokens=64, temperature=0,top_p=0.9") == {
        "max_new_tokens": 64, "temperature": 0.0, "top_p": 0.9}
    with pytest.raises(ConfigError, match="top_p must be in"):
        parse_gen_kwargs("top_p=1.5")
