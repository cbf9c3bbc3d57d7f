"""`fastmmeval run --model openai` end to end against `fastmmeval serve` (a tiny random-weight LM),
through the fault-injecting proxy: every doc answered or recorded failed with its reason, counts
that agree with what the proxy saw, no repeated calls on resume or re-run, and a canary key that
shows up nowhere."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from api_fixtures import FakeAPI

from fastmmeval.cli import main
from fastmmeval.models import MODELS
from fastmmeval.protocol import GenerationSettings, Message, Request, TextPart
from fastmmeval.serve.app import start_server
from fastmmeval.testing.faults import start_proxy

N_DOCS = 300
CANARY_ENV = "FMM_CANARY_KEY"
CANARY = "sk-canary-7f3a9c1e55d04b"
TASK = """\
task: api_text
dataset: {data_files: {test: text.jsonl}}
split: test
doc_id: id
doc_to_messages:
  - role: user
    content: [{text: "Count: {question}"}]
target: answer
output_type: generate
extractor: first_word
metrics: [exact_match]
generation: {max_new_tokens: 4}
"""


@pytest.fixture(scope="module")
def served(tiny_lm_dir: Path) -> Iterator[Any]:
    """`fastmmeval serve` over the tiny LM, as model 'tiny'."""
    model = MODELS.get("hf").from_args({"pretrained": str(tiny_lm_dir), "max_batch_size": "32"})
    with start_server(model, served_name="tiny", max_batch=32) as handle:
        yield handle


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("api_task")
    rows = [{"id": f"d{i}", "question": f"{i} {i + 1} {i + 2}", "answer": str(i)} for i in range(N_DOCS)]
    (folder / "text.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "task.yaml").write_text(TASK)
    return folder


@pytest.fixture
def canary(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(CANARY_ENV, CANARY)
    return CANARY


def test_backend_answers_as_the_served_model_does(served: Any, tiny_lm_dir: Path, canary: str, tmp_path: Path) -> None:
    """Through `serve`, `--model openai` gets the served model's own greedy text and log-probabilities."""
    backend = MODELS.get("openai").from_args(
        {"base_url": served.url, "model": "tiny", "api_key_env": CANARY_ENV, "cache_dir": str(tmp_path)}
    )
    direct = MODELS.get("hf").from_args({"pretrained": str(tiny_lm_dir)})
    chat = (Message("user", (TextPart("The cat sat on the"),)),)
    asks = [Request(f"g{i}", "generate", chat, GenerationSettings(max_new_tokens=3 + i)) for i in range(3)]
    assert [r.text for r in backend.generate(asks)] == [r.text for r in direct.generate(asks)]
    pick = [Request("l0", "loglikelihood", chat, continuations=(" mat", " moon", " dog"))]
    [remote], [local] = backend.loglikelihood(pick), direct.loglikelihood(pick)
    assert remote.logprobs == pytest.approx(local.logprobs, abs=1e-4) and remote.is_greedy == local.is_greedy


def run_args(url: str, task_dir: Path, out: Path, cache: Path, *extra: str) -> list[str]:
    model_args = (f"base_url={url},model=tiny,api_key_env={CANARY_ENV},cache_dir={cache},"
                  "timeout=2.5,max_retries=2,backoff=0.02,max_concurrency=16")
    return ["run", "--model", "openai", "--model_args", model_args, "--tasks", "api_text", "--include_path",
            str(task_dir), "--output_path", str(out), "--batch_size", str(N_DOCS), "--no_progress", *extra]


def read_run(out: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The samples and results.json of the newest run under `out`."""
    run = max((p for p in out.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime_ns)
    samples = [json.loads(line) for line in (run / "samples" / "api_text.jsonl").read_text().splitlines()]
    return samples, json.loads((run / "results.json").read_text())


def test_faulty_run_resume_and_rerun(served: Any, task_dir: Path, tmp_path: Path, canary: str,
                                     caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.DEBUG)
    out, cache = tmp_path / "runs", tmp_path / "cache"
    faults = {"rate_429": 0.03, "retry_after": 0.05, "rate_500": 0.15, "rate_hang": 0.03, "hang_s": 4.0,
              "rate_truncated": 0.05, "rate_malformed": 0.05}
    with start_proxy(served.url, seed=3, **faults) as proxy:
        assert main(run_args(proxy.url, task_dir, out, cache)) == 0
        samples, summary = read_run(out)
        seen = proxy.stats

        # Every doc once, answered or failed with the reason of its last attempt.
        assert sorted(s["doc_id"] for s in samples) == sorted(f"d{i}" for i in range(N_DOCS))
        failed = [s for s in samples if s["failed"] is not None]
        assert all(isinstance(s["response"], str) for s in samples if s["failed"] is None)
        assert all("model error: openai after 3 attempts: " in s["failed"] for s in failed)
        assert 0 < len(failed) < 45  # about 31%^3 of 300 (9) with these rates, more on a slow machine

        # The counts agree with one another and with the proxy.
        results, usage = summary["results"]["api_text"], summary["usage"]
        assert results["n_failed"] == len(failed) == usage["failed"]
        assert results["failures"] == {"model error": len(failed)}
        assert usage["requests"] == N_DOCS and usage["cache_hits"] == 0
        assert usage["api_calls"] == seen.requests == seen.by_path["/v1/chat/completions"]
        # Each failed attempt was retried or ended its request; each answered doc took one good attempt.
        errors, injected = usage["attempt_errors"], seen.faults
        assert sum(errors.values()) == usage["retries"] + usage["failed"]
        assert usage["api_calls"] - sum(errors.values()) == N_DOCS - len(failed)
        # Injected faults show up as such; a slow (loaded) server can turn a forwarded, damaged
        # reply into a timeout, and add timeouts of its own.
        assert errors["HTTP 429"] == usage["rate_limited"] == injected["429"] and errors["HTTP 500"] == injected["500"]
        assert errors["malformed"] <= injected["truncated"] + injected["malformed"]
        assert errors["timeout"] >= injected["hang"] and usage["prompt_tokens"] > 0

        # --resume: nothing is asked again.
        assert main(run_args(proxy.url, task_dir, out, cache, "--resume")) == 0
        assert proxy.stats.requests == seen.requests
        assert read_run(out)[1]["usage"] == usage  # the resumed run's zero calls added to the first one's

        # --resume --retry_failed: only the failed docs are asked again; each new sample supersedes the failed one.
        assert main(run_args(proxy.url, task_dir, out, cache, "--resume", "--retry_failed")) == 0
        lines, retried_summary = read_run(out)
        latest = {s["doc_id"]: s for s in lines}
        assert len(lines) == N_DOCS + len(failed) and len(latest) == N_DOCS
        assert not proxy.stats.by_body.keys() - seen.by_body.keys()
        assert len({h for h, n in proxy.stats.by_body.items() if n > seen.by_body.get(h, 0)}) == len(failed)
        still = [s for s in latest.values() if s["failed"] is not None]
        assert retried_summary["results"]["api_text"]["n_failed"] == len(still) <= len(failed)
        seen = proxy.stats

        # A fresh run: answered docs come from the cache; only the still failed ones reach the server.
        assert main(run_args(proxy.url, task_dir, out, cache)) == 0
        again, summary2 = read_run(out)
        assert summary2["usage"]["cache_hits"] == N_DOCS - len(still)
        new_bodies = seen.by_body.keys() ^ proxy.stats.by_body.keys()
        repeated = {h for h, n in proxy.stats.by_body.items() if n > seen.by_body.get(h, 0)}
        assert not new_bodies and len(repeated) == len(still)  # the failed docs' bodies, nothing else
        answered = {d: s["response"] for d, s in latest.items() if s["failed"] is None}
        assert all(s["response"] == answered[s["doc_id"]] for s in again if s["doc_id"] in answered)

    assert_canary_absent(canary, [out, cache], caplog, capsys)


def test_canary_key_stays_out_of_errors_when_the_server_rejects_it(
    task_dir: Path, tmp_path: Path, canary: str, caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A server that refuses the key and echoes it back: the run stops with one line naming the
    variable, and the key is nowhere."""
    caplog.set_level(logging.DEBUG)
    out, cache = tmp_path / "runs", tmp_path / "cache"
    refusal = {"error": {"message": f"invalid key Bearer {canary}"}}
    with FakeAPI(lambda n, body: web.json_response(refusal, status=401)) as server:
        assert main(run_args(server.url, task_dir, out, cache)) == 1
    err = capsys.readouterr().err
    assert f"check the key in ${CANARY_ENV}" in err and "***" in err
    assert_canary_absent(canary, [out, cache], caplog, capsys, err)


def assert_canary_absent(canary: str, folders: list[Path], caplog: pytest.LogCaptureFixture,
                         capsys: pytest.CaptureFixture[str], *texts: str) -> None:
    """The canary is in no file under `folders`, no log record, nothing printed."""
    captured = capsys.readouterr()
    for text in (caplog.text, captured.out, captured.err, *texts):
        assert canary not in text
    files = [p for folder in folders if folder.exists() for p in folder.rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert canary.encode() not in path.read_bytes(), path
