"""Fuzzing the command line: argv drawn from the real parsers (any flag of any subcommand, values negative,
zero, huge, empty, unicode, paths that are files, folders or missing). Whatever the input, `main` returns 0 or 1
or exits 2 (usage), with at most one error line and never a traceback. Model loading and the heavy parts of
the flows are stopped with a one-line error; runs with the scripted model over a tiny task go all the way."""

from __future__ import annotations

import argparse
import importlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_fixtures import write_tasks
from hypothesis import event, given, settings
from hypothesis import strategies as st

import fastmmeval.contam
import fastmmeval.distributed
import fastmmeval.tasks.download
from fastmmeval.cli import build_parser, main
from fastmmeval.errors import FastmmevalError
from fastmmeval.models.base import Model

ERROR_LINE = re.compile(r"fastmmeval( [a-z]+)*: error: ")  # ours and argparse's


class Stopped(FastmmevalError):
    """Raised where the fuzzed command would load a model or start heavy work."""


def stop(*args: Any, **kwargs: Any) -> Any:
    raise Stopped("stopped here by the fuzz test")


def subparsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for sub in subs:
        for name, child in sub.choices.items():
            yield from subparsers(child, (*path, name))


COMMANDS = sorted(subparsers(build_parser()), key=lambda c: c[0])
WORK = Path("fuzz")  # relative: every example runs in a scratch folder (see `scratch`)
PATHS = ["fuzz/file.txt", "fuzz/missing/x", "fuzz/folder", "fuzz/tasks", "fuzz/runs", "", "é/☃"]
NAMES = {
    "--model": ["scripted_student", "socratic", "nosuch", ""],
    "--tasks": ["qa", "qa_a,qa_b", "qa,", "nosuch", "mcq"],
    "--model_args": ["", "default=3", "nokey=1", "default", "default=3,default=4"],
    "--include_path": ["fuzz/tasks", "fuzz/missing", "fuzz/file.txt"],
}
NUMBERS = st.one_of(
    st.integers(-3, 12), st.sampled_from([2**31, 2**64, -(2**63)]), st.floats(allow_nan=True, allow_infinity=True)
).map(str)
VALUES = st.one_of(NUMBERS, st.sampled_from(PATHS), st.text(max_size=8), st.just(""))


def value_for(action: argparse.Action) -> st.SearchStrategy[str]:
    options = [VALUES]
    if action.choices:
        options += [st.sampled_from(sorted(map(str, action.choices)))] * 3
    if hasattr(action.type, "bounds"):  # mostly in range, so that runs get past argparse
        low, high, _ = action.type.bounds
        low = 0 if low is None else low
        in_range = st.integers(int(low), int(min(high if high is not None else low + 8, low + 8)))
        options += [in_range.map(str)] * 3
    for flag in action.option_strings:
        if flag in NAMES:
            return st.sampled_from(NAMES[flag])  # a scripted model argument drawn freely could sleep for ever
    return st.one_of(options)


@st.composite
def argvs(draw: st.DrawFn, base: list[str] | None = None) -> list[str]:
    """A subcommand with random flags; with `base` (a valid start of a `run`), that plus random other flags."""
    path, parser = draw(st.sampled_from(COMMANDS)) if base is None else (("run",), dict(COMMANDS)[("run",)])
    argv = list(path) + (base or [])
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.dest == "debug" or set(action.option_strings) & set(argv):
            continue
        optional = [True] + [False] * (3 if base is None else 9)  # a run with few flags gets past argparse
        if not draw(st.sampled_from([True] * 9 + [False] if action.required else optional)):
            continue
        values = [] if action.nargs == 0 else [draw(value_for(action)) for _ in range(draw(_count(action.nargs)))]
        if not action.option_strings:
            argv += values
        elif values and draw(st.booleans()):
            argv.append(f"{action.option_strings[0]}={values[0]}")
            argv += values[1:]
        else:
            argv += [action.option_strings[0], *values]
    if path[0] == "run" and draw(st.booleans()):
        argv.append("--no_progress")
    return argv


def _count(nargs: Any) -> st.SearchStrategy[int]:
    return {None: st.just(1), "?": st.integers(0, 1), "*": st.integers(0, 2), "+": st.integers(1, 2)}.get(
        nargs, st.just(1)
    )


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz_cli")
    (root / WORK / "folder").mkdir(parents=True)
    (root / WORK / "file.txt").write_text("just a file\n")
    write_tasks(root / WORK / "tasks", n_docs=3)
    return root


@pytest.fixture()
def heavy_work_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    load = Model.from_args.__func__  # type: ignore[attr-defined]

    def from_args(cls: type[Model], raw: dict[str, str]) -> Model:
        return load(cls, raw) if cls.name == "scripted_student" else stop()

    monkeypatch.setattr(Model, "from_args", classmethod(from_args))
    monkeypatch.setattr(fastmmeval.distributed, "launch", stop)  # --num_processes N would start processes
    # fastmmeval.lite.validate names the function the package exports, so reach the modules by name
    monkeypatch.setattr(importlib.import_module("fastmmeval.lite.export"), "select", stop)
    monkeypatch.setattr(importlib.import_module("fastmmeval.lite.validate"), "validate", stop)
    monkeypatch.setattr(fastmmeval.tasks.download, "download", stop)
    monkeypatch.setattr(importlib.import_module("fastmmeval.serve.app"), "start_server", stop)  # serves until killed
    for name in ("choose_tokenizers", "index_tokenizers"):
        monkeypatch.setattr(fastmmeval.contam, name, stop)
    for name in ("build", "capture_sources", "review", "export"):  # a browser and real sites, role models
        monkeypatch.setattr(importlib.import_module("fastmmeval.live.pipeline"), name, stop)


@given(argv=argvs())
def test_any_argv_exits_0_1_or_2_with_at_most_one_error_line(
    argv: list[str], scratch: Path, heavy_work_stopped: None, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    check_main(argv, scratch, capsys, monkeypatch)


@settings(max_examples=40)  # each one a real run of the scripted model, on top of the 200 above
@given(argv=argvs(base=["--model", "scripted_student", "--tasks", "qa", "--include_path", "fuzz/tasks"]))
def test_runs_with_any_other_flags_exit_0_1_or_2_with_at_most_one_error_line(
    argv: list[str], scratch: Path, heavy_work_stopped: None, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    check_main(argv, scratch, capsys, monkeypatch)


def check_main(argv: list[str], scratch: Path, capsys: pytest.CaptureFixture[str],
               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(scratch)
    env = dict(os.environ)
    try:
        try:
            status = main(argv)
        except SystemExit as e:
            status = e.code
            assert status == 2, argv
    finally:
        os.environ.clear()
        os.environ.update(env)  # --data_dir sets $FASTMMEVAL_DATA_DIR for the process
    err = capsys.readouterr().err
    event(f"{' '.join(argv[:2])}: exit {status}" + (" (stopped)" if "stopped here" in err else ""))
    assert status in (0, 1, 2), argv
    assert "Traceback" not in err, argv
    errors = [line for line in err.splitlines() if ERROR_LINE.match(line)]
    assert len(errors) == (0 if status == 0 else 1), (argv, err)
