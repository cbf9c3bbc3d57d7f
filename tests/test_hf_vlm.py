"""`--model hf` on tiny random-weight LLaVA, Qwen2-VL, Idefics3 and SmolVLM checkpoints: the engine's greedy
outputs equal transformers `generate` at batch size 1 and are the same at engine batch sizes 1, 4
and 16 (mixed prompt lengths and images, rows finishing at different steps and joining mid-run);
prefix-shared log-likelihoods equal naive forwards; a `fastmmeval run` writes the same results at
`--batch_size` 1 and 16."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from PIL import Image
from test_evaluate import only_run, task_dir  # noqa: F401  (task_dir is a fixture)
from test_vlm import _naive_loglikelihood, _reference_tokens, _requests, photos  # noqa: F401  (photos: fixture)
from vlm_fixtures import BUILDERS

from fastmmeval.cli import main
from fastmmeval.engine import ScheduledStep, Scheduler, Sequence
from fastmmeval.models import MODELS
from fastmmeval.models.local.hf import HF
from fastmmeval.protocol import GenerationSettings, Request

ARCHS = ["llava", "qwen2_vl", "idefics3", "smolvlm"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module", params=ARCHS)
def hf(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> HF:
    """The `hf` backend over a checkpoint built into a temp folder, loaded by its path."""
    folder = BUILDERS[request.param](tmp_path_factory.mktemp(request.param))
    return MODELS.get("hf").from_args({"pretrained": str(folder)})


def run(hf: HF, requests: list[Request], max_batch_size: int) -> tuple[list[Sequence], list[ScheduledStep]]:
    """`hf.generate` at the given engine batch size: the engine's finished sequences in request
    order (checked against the responses) and the steps it scheduled."""
    engine = hf.engine
    engine.scheduler.max_batch_size = max_batch_size
    finished: dict[str, Sequence] = {}
    steps: list[ScheduledStep] = []
    stream, schedule = engine.stream, engine.scheduler.schedule

    def recorded_stream(prompts: Iterable, window: int) -> Iterator:
        for request, seq in stream(prompts, window):
            finished[request.id] = seq
            yield request, seq

    def recorded_schedule() -> ScheduledStep:
        steps.append(schedule())
        return steps[-1]

    engine.stream, engine.scheduler.schedule = recorded_stream, recorded_schedule  # type: ignore[method-assign]
    try:
        responses = hf.generate(requests)
    finally:
        del engine.stream, engine.scheduler.schedule
    seqs = [finished[r.id] for r in requests]
    assert [r.error for r in responses] == [None] * len(requests)
    assert [r.text for r in responses] == [s.text for s in seqs]
    assert [r.usage["completion_tokens"] for r in responses] == [len(s.output_ids) for s in seqs]
    return seqs, steps


def test_greedy_equals_transformers_generate_and_is_batch_size_invariant(
        hf: HF, photos: list[Image.Image]) -> None:  # noqa: F811
    requests = [replace(r, generation=GenerationSettings(max_new_tokens=3 + (5 * i) % 11))
                for i, r in enumerate(_requests(photos))]  # rows finish at different steps
    expected = [_reference_tokens(hf.lm, r, r.generation.max_new_tokens) for r in requests]
    assert sum(len(e) for e in expected) > 40  # the comparison means something only if tokens come out
    assert len({tuple(e) for e in expected}) > 4  # outputs depend on the prompt and its images
    for max_batch_size in (1, 4, 16):
        seqs, steps = run(hf, requests, max_batch_size)
        assert [s.output_ids for s in seqs] == expected, max_batch_size
        assert max(len(s.decode) + len(s.prefill) for s in steps) <= max_batch_size
        if max_batch_size == 4:  # sequences joined while others were decoding
            assert any(s.decode and s.prefill for s in steps)
    if hf.arch.startswith("Qwen2VL"):  # M-RoPE: some rows' next positions differ from their token counts
        prompts = [hf.lm.prompt(r) for r in requests]
        assert any(int(hf.lm.collate([p]).next_positions[0]) != len(p.ids) for p in prompts)
    assert hf.engine.runner.cache is None and not hf.engine.runner.layout.rows


def test_loglikelihood_equals_naive_forwards(hf: HF, photos: list[Image.Image]) -> None:  # noqa: F811
    options = ("cat", "a dog sat on the mat", "Yes", "")
    requests = [Request(id=r.id, kind="loglikelihood", messages=r.messages, continuations=options)
                for r in _requests(photos)[:4]]
    responses = hf.loglikelihood(requests)
    for request, response in zip(requests, responses, strict=True):
        assert response.error is None
        assert response.usage["prompt_tokens"] == len(hf.lm.prompt(request).ids)
        for k, option in enumerate(options[:-1]):
            naive_lp, naive_greedy = _naive_loglikelihood(hf.lm, request, option)
            assert abs(response.logprobs[k] - naive_lp) < 1e-4, (request.id, option, response.logprobs[k], naive_lp)
            assert response.is_greedy[k] == naive_greedy
        assert (response.logprobs[-1], response.is_greedy[-1]) == (0.0, True)  # the empty option


def test_prompts_built_ahead_by_prepare_are_used_not_rebuilt(
        hf: HF, photos: list[Image.Image], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    requests = _requests(photos)[:3]
    expected = [r.text for r in hf.generate(requests)]
    for request in requests:
        hf.prepare(request)  # what the evaluator's background pool does ahead of the batch
    built: list[str] = []
    prompt = hf.lm.prompt
    monkeypatch.setattr(hf.lm, "prompt", lambda request: built.append(request.id) or prompt(request))
    assert [r.text for r in hf.generate(requests)] == expected
    assert built == [] and hf._ready == {}


def test_fingerprint_is_the_vision_language_models(hf: HF) -> None:
    fp = hf.fingerprint()
    assert fp["lm"] == hf.lm.fingerprint() and fp["lm"]["vlm"] == hf.args.pretrained
    assert "max_batch_size" not in fp["settings"]


def test_a_run_writes_the_same_results_at_batch_sizes_1_and_16(
        task_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    folder = BUILDERS["llava"](tmp_path / "llava")
    running: list[int] = []  # how many sequences ran at each engine step
    schedule = Scheduler.schedule

    def recorded(scheduler: Scheduler) -> ScheduledStep:
        step = schedule(scheduler)
        running.append(len(scheduler.running))
        return step

    monkeypatch.setattr(Scheduler, "schedule", recorded)
    runs, most_running = [], []
    for batch_size in ("1", "16"):
        out = tmp_path / f"bs{batch_size}"
        running.clear()
        # At 16, docs are prepared in runs while the engine waits (as on a CPU whose cores it takes).
        monkeypatch.setattr(HF, "overlaps_input_work", lambda self, chunked=batch_size == "16": not chunked)
        assert main(["run", "--model", "hf", "--model_args", f"pretrained={folder},max_batch_size=4", "--tasks",
                     "local", "--include_path", str(task_dir), "--output_path", str(out), "--no_progress",
                     "--batch_size", batch_size]) == 0
        most_running.append(max(running))
        run_dir = only_run(out)
        results = json.loads((run_dir / "results.json").read_text())["results"]
        samples = {task: {s["doc_id"]: s for s in map(json.loads, lines)}  # responses, logprobs, scores
                   for task in results
                   for lines in [(run_dir / "samples" / f"{task}.jsonl").read_text().splitlines()]}
        runs.append(({t: r["metrics"] for t, r in results.items()}, samples))
    (metrics_1, samples_1), (metrics_16, samples_16) = runs
    assert metrics_1 == metrics_16 and samples_1 == samples_16
    # The evaluator groups docs by --batch_size, but the engine takes them as one stream: even at
    # --batch_size 1 it runs up to max_batch_size sequences at once.
    assert most_running == [4, 4]
    assert set(samples_1) == {"local_vqa", "local_mc"}
    answered = [s["response"] for s in samples_1["local_vqa"].values() if s["failed"] is None]
    assert len(answered) == 6 and len(set(answered)) > 1  # the broken image and missing field fail
    assert all(s["failed"] is None and len(s["logprobs"]) == 4 for s in samples_1["local_mc"].values())
