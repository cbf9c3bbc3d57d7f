"""What a user sees when something goes wrong: one line (`fastmmeval: error: ...`, exit 1) and no traceback
without --debug, the reasons docs failed, and files that keep what was computed."""

from __future__ import annotations

import errno
import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli_fixtures import run_argv, write_tasks
from rich.console import Console
from rich.table import Table

import fastmmeval.results
from fastmmeval.cli import main
from fastmmeval.console import print_table
from fastmmeval.tasks.sources import DATA_DIR_ENV


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("fastmmeval: error: ")
    return lines[0]


def only_run(out: Path) -> Path:
    [run] = [p for p in out.iterdir() if p.is_dir()]
    return run


def test_an_output_path_that_is_a_file_fails_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "runs").write_text("not a folder")
    assert main(run_argv(write_tasks(tmp_path / "tasks"), tmp_path / "runs")) == 1
    assert "--output_path" in one_error_line(capsys.readouterr().err)
    assert main(run_argv(write_tasks(tmp_path / "tasks"), tmp_path / "runs" / "below")) == 1
    assert "not a directory" in one_error_line(capsys.readouterr().err).lower()


def test_a_read_only_output_path_fails_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real_mkdir = Path.mkdir

    def refused(self: Path, *args: object, **kwargs: object) -> None:
        if "runs" in self.parts:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
        real_mkdir(self, *args, **kwargs)

    tasks = write_tasks(tmp_path / "tasks")
    monkeypatch.setattr(Path, "mkdir", refused)  # root ignores a read-only mode, so refuse the way the OS does
    assert main(run_argv(tasks, tmp_path / "runs")) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "--output_path" in line and "Permission denied" in line


def test_disk_full_while_writing_results_keeps_the_samples_and_says_how_to_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = fastmmeval.results.write_json_atomic

    def disk_full(path: Path, data: object) -> None:
        if path.name == "results.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write(path, data)

    tasks, out = write_tasks(tmp_path / "tasks"), tmp_path / "runs"
    monkeypatch.setattr(fastmmeval.results, "write_json_atomic", disk_full)
    assert main(run_argv(tasks, out)) == 1
    run = only_run(out)
    line = one_error_line(capsys.readouterr().err)
    assert "No space left on device" in line and "intact" in line and f"--resume {run}" in line
    assert len((run / "samples" / "qa_a.jsonl").read_text().splitlines()) == 8

    monkeypatch.setattr(fastmmeval.results, "write_json_atomic", real_write)
    assert main(run_argv(tasks, out, "--resume", str(run))) == 0
    for task in ("qa_a", "qa_b"):
        ids = [json.loads(s)["doc_id"] for s in (run / "samples" / f"{task}.jsonl").read_text().splitlines()]
        assert sorted(ids) == sorted(set(ids)) and len(ids) == 8  # nothing asked twice


def test_disk_full_while_appending_samples_fails_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def disk_full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    class FullDisk(SimpleNamespace):  # the os module as fastmmeval.results sees it, whose fsync fails
        def __getattr__(self, name: str) -> object:
            return getattr(os, name)

    monkeypatch.setattr(fastmmeval.results, "os", FullDisk(fsync=disk_full))  # the samples' fsync only
    assert main(run_argv(write_tasks(tmp_path / "tasks"), tmp_path / "runs")) == 1
    assert "qa_a.jsonl: cannot write (No space left on device)" in one_error_line(capsys.readouterr().err)


def test_debug_is_accepted_after_the_subcommand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = run_argv(write_tasks(tmp_path / "tasks"), tmp_path / "runs")
    argv[argv.index("--tasks") + 1] = "qa_typo"
    assert main(argv) == 1
    assert "unknown task 'qa_typo'" in one_error_line(capsys.readouterr().err)
    assert main([*argv, "--debug"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("fastmmeval: error: unknown task")


def test_a_template_typo_that_fails_every_doc_prints_why_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runs"
    assert main(run_argv(write_tasks(tmp_path / "tasks", field="questoin"), out)) == 1
    err = capsys.readouterr().err
    assert "qa_a: 8 of 8 docs failed" in err
    assert "  8 x missing field: missing field 'questoin' used by the prompt template" in err
    assert err.strip().splitlines()[-1].startswith("fastmmeval: error: every doc of qa_a, qa_b failed")
    results = json.loads((only_run(out) / "results.json").read_text())["results"]
    assert results["qa_a"]["n_failed"] == 8  # written all the same


def test_some_failed_docs_are_reported_with_counts_but_the_run_succeeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = write_tasks(tmp_path / "tasks")
    rows = (tasks / "qa.jsonl").read_text().splitlines()
    rows[2] = json.dumps({"id": "d2", "answer": "2"})  # no question
    rows[5] = json.dumps({"id": "d5", "answer": "5"})
    (tasks / "qa.jsonl").write_text("\n".join(rows) + "\n")
    assert main(run_argv(tasks, tmp_path / "runs")) == 0
    err = capsys.readouterr().err
    assert "qa_a: 2 of 8 docs failed" in err and "  2 x missing field: missing field 'question'" in err
    assert "error" not in err


def test_every_file_of_a_run_folder_respects_the_umask(tmp_path: Path) -> None:
    for umask, mode in ((0o022, 0o644), (0o077, 0o600), (0o002, 0o664)):
        out = tmp_path / f"runs{umask:o}"
        old = os.umask(umask)
        try:
            assert main(run_argv(write_tasks(tmp_path / "tasks"), out)) == 0
        finally:
            os.umask(old)
        files = [p for p in only_run(out).rglob("*") if p.is_file()]
        assert {p.name for p in files} >= {"manifest.json", "results.json", "qa_a.jsonl", ".lock"}
        assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in files} == {p.name: mode for p in files}


def test_tasks_piped_to_a_closed_reader_exits_quietly(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "fastmmeval.cli", "tasks"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # like `| head -1` once it has its line
    err = proc.stderr.read()
    assert proc.wait() == 141 and err == b""


def test_a_closed_pipe_while_printing_json_is_not_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    class ClosedPipe(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["tasks", "--info", "demo_yesno", "--json"]) == 141


def test_tables_off_a_terminal_are_plain_lines_that_keep_every_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = {line.split("\t")[0] for line in lines}
    assert {"mmbench_en_dev", "mmbench_cn_dev", "mmbench_en_dev_lite"} <= names
    assert lines[1].split("\t") == ["Task", "Groups", "Mode", "Dataset", "Split", "Docs", "Docs from", "Metrics"]


def test_in_a_terminal_the_name_column_is_never_cut(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich then draws boxes as in a terminal
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["tasks"]) == 0
    printed = capsys.readouterr().out
    names = {row.split("│")[1].strip() for row in printed.splitlines() if row.startswith("│")}
    assert {"mmbench_en_dev_lite", "mmbench_cn_dev_lite", "mmbench_en_dev"} <= names
    table = Table(title="t")
    for column in ("Task", "Dataset", "Metrics"):
        table.add_column(column)
    for name in ("mmbench_en_dev_lite", "mmbench_cn_dev_lite"):
        table.add_row(name, "lmms-lab/MMBench with a long description", "accuracy,circular_accuracy")
    console = Console(width=40, force_terminal=True, record=True)
    print_table(table, console)
    assert "mmbench_en_dev_lite" in console.export_text()


def test_tasks_info_without_network_prints_the_card_fast(tmp_path: Path) -> None:
    offline = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")  # as `make test` sets them
    # ... and a data dir an earlier test's `run --data_dir` left in this process's environment
    env = {k: v for k, v in os.environ.items() if k not in (*offline, DATA_DIR_ENV)}
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # refused at once, as with no network
    # datasets is imported first so that its import time is not counted, and to check that offline mode
    # still reaches a hub library that read its settings before.
    code = ("import datasets, sys, time; from fastmmeval.cli import main; t = time.monotonic(); "
            "rc = main(['tasks', '--info', 'mmbench_en_dev']); print('seconds', time.monotonic() - t); sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seconds = float(done.stdout.strip().splitlines()[-1].split()[1])
    assert seconds < 3.0, f"{seconds:.1f} s"
    assert "task\tmmbench_en_dev" in done.stdout and "data_error" in done.stdout
    assert done.stderr.strip().splitlines() == [
        "fastmmeval: note: the Hugging Face Hub cannot be reached: the card shows what a local copy allows "
        "(data_error says what is missing)"]


def test_a_run_whose_model_cannot_load_leaves_no_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = run_argv(write_tasks(tmp_path / "tasks"), tmp_path / "runs")
    argv[argv.index("--model_args") + 1] = "no_such_arg=1"
    assert main(argv) == 1
    assert "no_such_arg" in one_error_line(capsys.readouterr().err)
    assert list((tmp_path / "runs").iterdir()) == []  # nothing for a later --resume to take for a run


def test_a_pipe_closed_after_the_first_lines_is_not_rich_s_exit_1(monkeypatch: pytest.MonkeyPatch) -> None:
    class ClosedAfterTheTable(io.StringIO):  # `fastmmeval tasks | head -1`: the table got out, the group lines not
        def write(self, text: str) -> int:
            if text.startswith("group "):
                raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))
            return super().write(text)

    monkeypatch.setattr(sys, "stdout", ClosedAfterTheTable())
    assert main(["tasks"]) == 141
