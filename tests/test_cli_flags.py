"""Every numeric flag of every subcommand refuses a value out of its range as a usage error (exit 2, one
error line naming the flag) before any model or data loads."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from fastmmeval.cli import build_parser, main
from fastmmeval.models.base import Model

# The least each subcommand needs to get past argparse.
REQUIRED = {
    "run": ["--model", "m", "--tasks", "t"],
    "lite select": ["--tasks", "t", "--size", "1", "--out", "o"],
    "lite validate": ["--full", "f", "--lite", "l"],
    "contam index": ["--index", "i", "c"],
    "contam add": ["--index", "i", "c"],
    "contam scan": ["--tasks", "t", "--out", "o"],
    "serve": ["--model", "m"],
    "judge agree": ["r"],
    "tasks": [],
    "live capture": [],
    "live build": ["--generator", "g"],
    "live review": [],
    "live export": [],
    "evolve spec": ["--tasks", "t", "--out", "o", "--writer", "w"],
    "evolve patterns": ["--tasks", "t", "--out", "o", "--writer", "w"],
    "evolve plan": ["--tasks", "t", "--out", "o", "--writer", "w"],
    "evolve acquire": ["--tasks", "t", "--out", "o", "--writer", "w"],
    "evolve generate": ["--tasks", "t", "--out", "o", "--writer", "w"],
    "evolve verify": ["--tasks", "t", "--out", "o", "--writer", "w"],
    "evolve export": ["--tasks", "t", "--out", "o", "--writer", "w"],
    "evolve run": ["--tasks", "t", "--out", "o", "--writer", "w"],
    "evolve review": ["--out", "o"],
    "compare pacost": ["--model", "m", "--tasks", "t", "--paraphraser", "p"],
    "compare consistency": ["--runs", "a", "--runs", "b", "--tasks", "a,b"],
    "compare distribution": ["--tasks", "a,b"],
    "report": ["r"],
}


def subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path
    for sub in subs:
        for name, child in sub.choices.items():
            yield from subcommands(child, (*path, name))


def parser_of(path: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in path:
        [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = sub.choices[name]
    return parser


def out_of_range(check: object) -> list[str]:
    low, high, low_open = check.bounds  # type: ignore[attr-defined]
    values = ["abc", ""]
    if low is not None:
        values.append(str(low) if low_open else str(low - 1))
    if high is not None:
        values.append(str(high + 1))
    if check.__name__ == "number":  # type: ignore[attr-defined]
        values += ["nan", "inf"]
    return values


def numeric_flags() -> Iterator[tuple[tuple[str, ...], str, str]]:
    for path in subcommands(build_parser()):
        for action in parser_of(path)._actions:
            if action.option_strings and hasattr(action.type, "bounds"):
                for value in out_of_range(action.type):
                    yield path, action.option_strings[0], value


CASES = list(numeric_flags())


def test_no_flag_takes_an_unchecked_number() -> None:
    for path in subcommands(build_parser()):
        for action in parser_of(path)._actions:
            assert action.type not in (int, float), f"{' '.join(path)} {action.option_strings}: use fastmmeval.argtypes"
    assert {p for p, _, _ in CASES} >= {("run",), ("lite", "select"), ("contam", "scan"), ("serve",)}
    flags = {(" ".join(p), f) for p, f, _ in CASES}
    assert {("run", "--limit"), ("run", "--batch_size"), ("run", "--bootstrap_iters"), ("serve", "--port")} <= flags


@pytest.mark.parametrize(("path", "flag", "value"), CASES, ids=[f"{' '.join(p)} {f}={v!r}" for p, f, v in CASES])
def test_a_numeric_flag_out_of_range_is_a_usage_error_before_any_model_loads(
    path: tuple[str, ...], flag: str, value: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_model(cls: type, raw: dict[str, str]) -> Model:
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(Model, "from_args", classmethod(no_model))
    with pytest.raises(SystemExit) as exited:
        main([*path, *REQUIRED[" ".join(path)], f"{flag}={value}"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    [line] = [line for line in err.splitlines() if "error:" in line]
    assert f"argument {flag}:" in line and "Traceback" not in err


@pytest.mark.parametrize("tasks", ["", ",", " , "])
def test_an_empty_task_list_is_a_usage_error(tasks: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "--model", "m", f"--tasks={tasks}"])
    assert exited.value.code == 2 and "argument --tasks: expected comma-separated names" in capsys.readouterr().err


@pytest.mark.parametrize(("changes", "message"), [
    ({"tasks": []}, "no tasks given"),
    ({"limit": 0}, "--limit must be at least 1, got 0"),
    ({"limit": -1}, "--limit must be at least 1, got -1"),
    ({"bootstrap_iters": -5}, "--bootstrap_iters must be at least 0, got -5"),
    ({"batch_size": -3}, "--batch_size must be at least 1, got -3"),
])
def test_the_python_api_checks_the_same_ranges(changes: dict, message: str, tmp_path) -> None:
    from fastmmeval.errors import ConfigError
    from fastmmeval.evaluate import RunConfig, evaluate

    batch_size = changes.pop("batch_size", None)
    config = RunConfig(**{"model": "scripted_student", "tasks": ["qa"], **changes})
    with pytest.raises(ConfigError, match=message):
        evaluate(config, output_path=tmp_path, batch_size=batch_size)
    assert not any(tmp_path.iterdir())  # refused before a run folder was made
