"""Logging a run folder to W&B (offline, its run file read back) and TensorBoard (its event file read back)."""

from __future__ import annotations

import json
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fastmmeval.errors import ConfigError
from fastmmeval.report.loggers import SAMPLE_COLUMNS, log_run, parse_wandb_args, run_scalars

RESULTS = {
    "run_id": "socratic_20260101-000000",
    "config": {"model": "socratic", "tasks": ["qa", "yn"]},
    "results": {
        "qa": {
            "n": 3, "n_failed": 1, "metrics": {"acc": {"value": 0.5, "stderr": 0.25}},
            "breakdowns": {"split": {"easy": {"acc,none": 1.0, "acc_stderr,none": None, "n": 1},
                                     "hard": {"acc,none": 0.0, "acc_stderr,none": 0.0, "n": 1}}},
            "timing": {"wall_s": 2.5, "stages": {"model": 2.0}}, "tokens": {"prompt": 120, "generated": 9},
        },
        "yn": {"n": 2, "n_failed": 0, "metrics": {"f1": {"value": 0.75, "stderr": None}}},
    },
    "overall": {"overall": 62.5, "stderr": None, "excluded": []},
}
SAMPLES = [
    {"doc_id": "q0", "prompt": [{"role": "user", "content": "<script>alert(1)</script> What?"}],
     "response": "A", "extracted": "A", "target": "A", "metrics": {"acc": 1}, "failed": None},
    {"doc_id": "q1", "prompt": [{"role": "user", "content": "Which?"}],
     "response": "C", "extracted": None, "target": ["B"], "metrics": {"acc": 0}, "failed": None},
    {"doc_id": "q2", "failed": "task qa, doc q2: unreadable image", "failure_kind": "unreadable image"},
]


def write_run(root: Path) -> Path:
    run = root / RESULTS["run_id"]
    (run / "samples").mkdir(parents=True)
    (run / "results.json").write_text(json.dumps(RESULTS))
    manifest = {"config": RESULTS["config"], "task_fingerprints": {"qa": "f-qa", "yn": "f-yn"},
                "model_fingerprint": {"lm": "smol"}}
    (run / "manifest.json").write_text(json.dumps(manifest))
    (run / "samples" / "qa.jsonl").write_text("".join(json.dumps(s) + "\n" for s in SAMPLES))
    (run / "samples" / "yn.jsonl").write_text("")
    return run


EXPECTED = {
    "qa/acc": 0.5, "qa/acc_stderr": 0.25, "qa/n": 3, "qa/n_failed": 1,
    "qa/split/easy/acc": 1.0, "qa/split/easy/n": 1,
    "qa/split/hard/acc": 0.0, "qa/split/hard/acc_stderr": 0.0, "qa/split/hard/n": 1,
    "qa/timing/wall_s": 2.5, "qa/timing/stages/model": 2.0, "qa/tokens/prompt": 120, "qa/tokens/generated": 9,
    "yn/f1": 0.75, "yn/n": 2, "yn/n_failed": 0, "overall": 62.5,
}


def test_the_scalars_of_a_run_are_its_values_by_name_with_none_left_out() -> None:
    assert run_scalars(RESULTS) == EXPECTED


def test_wandb_args_parse_as_lmms_eval_writes_them() -> None:
    got = parse_wandb_args("project=evals, name=smol-demo,entity=lab,job_type=eval,tags=a|b,mode=offline")
    assert got == {"project": "evals", "name": "smol-demo", "entity": "lab", "job_type": "eval",
                   "tags": "a|b", "mode": "offline"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name=x", "project=... is required"),
        ("project=p,colour=red", "unknown key 'colour'"),
        ("project=p,name=", "name has an empty value"),
        ("project=p,offline", "'offline' is not key=value"),
        ("project=p,project=q", "project given twice"),
        ("project=p,mode=sometimes", "mode 'sometimes'"),
    ],
)
def test_bad_wandb_args_are_one_line_naming_the_item(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        parse_wandb_args(text)


def test_a_folder_without_results_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no results.json"):
        log_run(tmp_path, tensorboard_dir=tmp_path / "tb")


def wandb_records(path: Path) -> Iterator[Any]:
    """The records of a W&B run file (a LevelDB-style log of protobuf records in 32 KiB blocks)."""
    from wandb.proto import wandb_internal_pb2

    raw = path.read_bytes()
    assert raw[:4] == b":W&B"
    pos, block, part = 7, 32768, b""
    while pos + 7 <= len(raw):
        if block - pos % block < 7:  # a block's tail too short for a record header is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", raw[pos : pos + 7])
        part += raw[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(part)
            part = b""
            yield record


@pytest.fixture
def offline_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_API_KEY", "secret-xyz")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for name in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path))
    return tmp_path


def test_a_run_logged_to_wandb_offline_reads_back_with_its_values_and_samples(offline_wandb: Path) -> None:
    import wandb

    run = write_run(offline_wandb / "runs")
    log_run(run, wandb_args=parse_wandb_args("project=evals,name=smol,tags=demo|ci"))
    wandb.teardown()  # the run file is written by wandb's service process: wait until it has closed it
    [run_file] = offline_wandb.glob("wandb/offline-run-*/run-*.wandb")
    records = list(wandb_records(run_file))
    [history] = [r.history for r in records if r.WhichOneof("record_type") == "history"]
    logged = {"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in history.item}
    assert {k: logged[k] for k in EXPECTED} == EXPECTED
    [started] = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (started.project, started.display_name, list(started.tags)) == ("evals", "smol", ["demo", "ci"])
    config = {i.key: json.loads(i.value_json) for i in started.config.update}
    assert config["task_fingerprints"] == {"qa": "f-qa", "yn": "f-yn"}
    assert config["run_id"] == RESULTS["run_id"]

    [table_file] = run_file.parent.glob("files/media/table/samples/qa_*.table.json")
    table = json.loads(table_file.read_text())
    assert table["columns"] == list(SAMPLE_COLUMNS)
    assert table["data"][0] == ["q0", "user: <script>alert(1)</script> What?", "A", "A", "A", '{"acc": 1}', ""]
    assert table["data"][1][3:5] == ["", '["B"]']
    assert table["data"][2][0] == "q2" and table["data"][2][-1] == "task qa, doc q2: unreadable image"
    assert (logged["samples/qa/nrows"], logged["samples/yn/nrows"]) == (3, 0)

    written = [p for p in offline_wandb.rglob("*") if p.is_file()]
    assert written and not [p for p in written if b"secret-xyz" in p.read_bytes()]


def test_a_run_logged_to_tensorboard_reads_back_with_its_values(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log_run(write_run(tmp_path / "runs"), tensorboard_dir=tmp_path / "tb")
    events = EventAccumulator(str(tmp_path / "tb" / RESULTS["run_id"]))
    events.Reload()
    got = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    assert got == {tag: [(0, pytest.approx(value))] for tag, value in EXPECTED.items()}


def test_missing_wandb_asks_for_pip_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # as when it is not installed
    with pytest.raises(ConfigError, match="pip install wandb"):
        log_run(write_run(tmp_path), wandb_args={"project": "p"})
