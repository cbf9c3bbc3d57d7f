"""bench/bench_serve.py in its short mode: the real `serve` command under a few seconds of mixed load."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "bench_serve.py"


def test_a_short_bench_answers_everything_and_ends_with_its_json_line(capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("bench_serve", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)  # its dataclass looks its module up there
    spec.loader.exec_module(bench)
    report = bench.main(["--seconds", "3", "--warmup", "1", "--clients", "20", "--invalid", "0.3"])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == report
    assert report["valid"] > 0 and report["invalid"] > 0 and report["answered"] == report["requests"]
    assert report["valid_5xx"] == report["valid_not_200"] == report["invalid_not_4xx"] == report["unanswered"] == 0
    assert report["server_tracebacks"] == 0 and report["server_exit"] == 0
    assert report["p50_ms"] <= report["p99_ms"] and report["rss_end_mb"] > 0
