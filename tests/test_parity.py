"""Every benchmark task scores what lmms-eval 0.7.3's own code scores on the same responses, and
builds the prompt it builds, except where its task file lists a difference, each shown here.

For each task with a fixture (tests/parity_cases/<family>.py: a `ParityCase` with rows in the hub
schema and extra responses), `fastmmeval.parity.check_task` scores the generic response pool plus
the extra responses with lmms-eval's process_results / filters / aggregations and with ours, and
compares the prompts. Each mismatch must be explained by a difference the task file lists (its id
names a registered explainer, python/fastmmeval/parity/differences/), and each listed difference
must explain at least one mismatch: the list can be neither incomplete nor stale. To add a task,
append a ParityCase to its family's CASES (a new family gets a new module there)."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import parity_cases
import pytest
from judge_fixtures import ScriptedJudge
from parity_case import ParityCase
from task_fixtures import save_split, task_config

from fastmmeval.cli import main
from fastmmeval.judge.judge import Judge, JudgeSpec
from fastmmeval.parity import EXPLAINERS, check_task, report_lines
from fastmmeval.tasks.catalog import Catalog
from fastmmeval.tasks.sources import DATA_DIR_ENV
from fastmmeval.tasks.task import Task

CASES: list[ParityCase] = [
    case
    for module in pkgutil.iter_modules(parity_cases.__path__)
    for case in importlib.import_module(f"parity_cases.{module.name}").CASES
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.task)
def test_scores_and_prompt_equal_lmms_eval_s_but_for_listed_differences(
    case: ParityCase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    config = task_config(case.task)
    save_split(tmp_path, config, case.rows(), case.features)
    if case.save_more:
        case.save_more(tmp_path)
    judge = Judge(JudgeSpec("judge", "scripted_judge"), ScriptedJudge(case.judge)) if case.judge else None
    report = check_task(Task(config), extra=case.extra, peer=case.peer() if case.peer else None, judge=judge)
    summary = "\n".join(report_lines(report, examples=5))
    assert not report.unexplained, summary
    assert not report.unshown, summary
    assert report.cases >= 20 * report.docs // 2, summary  # the pool, not a handful of answers


def test_every_listed_difference_names_an_explainer() -> None:
    catalog = Catalog()
    for name in catalog.tasks:
        ref = catalog.tasks.get(name).lmms_eval
        for difference in ref.differences if ref else ():
            assert difference in EXPLAINERS, f"task {name}: difference {difference!r} has no explainer"


def _saved(task: str, data_dir: Path) -> None:
    case = next(c for c in CASES if c.task == task)
    save_split(data_dir, task_config(task), case.rows(), case.features)


def test_the_cli_prints_mismatches_by_the_difference_that_explains_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _saved("ai2d", tmp_path)
    assert main(["tasks", "--parity", "ai2d", "--data_dir", str(tmp_path), "--limit", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("ai2d vs lmms-eval ai2d: 2 docs, 42 responses,") and out[0].endswith(" 0 unexplained")
    assert any(line.strip().startswith(("2 x stop_string", "3 x stop_string")) for line in out)
    assert not list(Path.cwd().glob("submissions")), "lmms-eval's files go to a scratch folder"


def test_the_cli_refuses_a_judged_task_instead_of_calling_gpt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _saved("mmbench_en_dev", tmp_path)
    assert main(["tasks", "--parity", "mmbench_en_dev", "--data_dir", str(tmp_path)]) == 1
    [line] = [x for x in capsys.readouterr().err.splitlines() if "error:" in x]
    assert "mmbench_en_dev is graded by a judge" in line and "stand-in judge" in line


def test_every_benchmark_task_has_a_parity_case() -> None:
    """Each task that names an lmms-eval task has a case here; a lite subset counts through its parent's
    case (same protocol, other data) and a submission split is not scored here."""
    catalog = Catalog()
    covered = {c.task for c in CASES}
    missing = []
    for name in catalog.tasks:
        config = catalog.tasks.get(name)
        if config.lmms_eval is None or config.submission is not None or name in covered:
            continue
        if name.endswith("_lite") and name.removesuffix("_lite") in covered:
            continue
        missing.append(name)
    assert not missing, f"tasks without a parity case in tests/parity_cases: {missing}"


def test_the_cli_checks_a_caption_task_with_lmms_eval_s_stand_ins_and_prints_only_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """lmms-eval's side gets the stand-ins PeerTask.load adds (fastmmeval.parity.setups: PTBTokenizer
    once per distinct caption, one METEOR process; without them this one doc takes minutes), and
    its chatter (pycocoevalcap prints thousands of lines) stays out of the report."""
    _saved("coco2017_cap_val", tmp_path)
    assert main(["tasks", "--parity", "coco2017_cap_val", "--data_dir", str(tmp_path), "--limit", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("coco2017_cap_val vs lmms-eval coco2017_cap_val: 1 docs, 16 responses,")
    assert out[0].endswith(" 0 unexplained") and len(out) < 10, out
