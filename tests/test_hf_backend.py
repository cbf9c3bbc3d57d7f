"""The `hf` backend and its engine on a tiny random-weight Llama: exact agreement with transformers
`generate`, batch invariance with sequences joining mid-run, stopping, sampling, refusals."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from PIL import Image
from test_causal_lm import QUESTIONS as CAUSAL_LM_QUESTIONS

from fastmmeval.engine import ScheduledStep, Sequence, kv_cache
from fastmmeval.errors import ConfigError
from fastmmeval.models import MODELS
from fastmmeval.models.local.causal_lm import CausalLM
from fastmmeval.models.local.hf import HF
from fastmmeval.protocol import GenerationSettings, ImagePart, Message, Request, TextPart
from fastmmeval.util import available_cores

QUESTIONS = [*CAUSAL_LM_QUESTIONS, "Is the cat on the mat? Yes, no or maybe.", "STOP 42"]


def messages(question: str, image: Image.Image | None = None) -> tuple[Message, ...]:
    parts = ((ImagePart(image),) if image else ()) + (TextPart(question),)
    return (Message("system", (TextPart("Answer."),)), Message("user", parts))


def request(i: int, question: str, settings: GenerationSettings) -> Request:
    return Request(id=f"r{i}", kind="generate", messages=messages(question), generation=settings)


@pytest.fixture(scope="module")
def hf(tiny_lm_dir: Path) -> HF:
    return MODELS.get("hf").from_args({"pretrained": str(tiny_lm_dir), "max_batch_size": "4"})


@pytest.fixture(scope="module")
def prompts(hf: HF) -> list[list[int]]:
    """16 prompts of mixed lengths."""
    return [hf.lm.chat_ids([{"role": "user", "content": q * (1 + i // len(QUESTIONS))}])
            for i, q in enumerate(QUESTIONS * 2)]


def run_engine(hf: HF, prompts: list[list[int]], settings: list[GenerationSettings], max_batch_size: int,
               max_batch_tokens: int = 4096) -> tuple[list[Sequence], list[ScheduledStep]]:
    """The engine's outputs at the given limits, and the steps it scheduled."""
    engine = hf.engine
    engine.scheduler.max_batch_size, engine.scheduler.max_batch_tokens = max_batch_size, max_batch_tokens
    steps: list[ScheduledStep] = []
    schedule = engine.scheduler.schedule

    def recorded() -> ScheduledStep:
        steps.append(schedule())
        return steps[-1]

    engine.scheduler.schedule = recorded  # type: ignore[method-assign]
    try:
        return engine.generate([(p, s, None) for p, s in zip(prompts, settings, strict=True)]), steps
    finally:
        del engine.scheduler.schedule


def reference(hf: HF, prompt: list[int], max_new_tokens: int) -> list[int]:
    """transformers `generate`, greedy, batch size 1, without the final EOS."""
    with torch.inference_mode():
        out = hf.lm.model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                   do_sample=False, max_new_tokens=max_new_tokens,
                                   eos_token_id=sorted(hf.lm.eos_ids), pad_token_id=hf.lm.pad_id)
    tokens = out[0, len(prompt):].tolist()
    return tokens[:-1] if tokens and tokens[-1] in hf.lm.eos_ids else tokens


def test_greedy_equals_transformers_generate_and_is_batch_size_invariant(
        hf: HF, prompts: list[list[int]]) -> None:
    lengths = [3 + (5 * i) % 17 for i in range(len(prompts))]  # rows finish at different steps
    settings = [GenerationSettings(max_new_tokens=n) for n in lengths]
    expected = [reference(hf, p, n) for p, n in zip(prompts, lengths, strict=True)]
    assert sum(len(e) for e in expected) > 100  # the comparison means something only if tokens come out
    for max_batch_size, max_batch_tokens in ((1, 4096), (4, 4096), (16, 4096), (16, 200)):
        seqs, steps = run_engine(hf, prompts, settings, max_batch_size, max_batch_tokens)
        assert [s.output_ids for s in seqs] == expected, (max_batch_size, max_batch_tokens)
        assert [s.text for s in seqs] == [hf.lm.tokenizer.decode(e, skip_special_tokens=True) for e in expected]
        assert all(s.finish_reason == ("length" if len(e) == n else "eos")
                   for s, e, n in zip(seqs, expected, lengths, strict=True))
        assert max(len(s.decode) + len(s.prefill) for s in steps) <= max_batch_size
        if max_batch_size == 4:  # sequences joined while others were decoding
            assert any(s.decode and s.prefill for s in steps)
        if max_batch_tokens == 200:  # the budget, not the batch size, held admissions back
            assert len(steps[0].prefill) < len(prompts)
            assert all(s.num_tokens <= 200 or (not s.decode and len(s.prefill) == 1) for s in steps)
    assert hf.engine.runner.cache is None and not hf.engine.runner.layout.rows


def test_outputs_stay_the_same_when_the_cache_moves_rows_at_almost_every_step(
        hf: HF, prompts: list[list[int]], monkeypatch: pytest.MonkeyPatch) -> None:
    """No spare columns or rows: the buffers are reallocated for nearly every join and decode step."""
    monkeypatch.setattr(kv_cache, "SPARE_LEFT", 0)
    monkeypatch.setattr(kv_cache, "SPARE_RIGHT", 1)
    monkeypatch.setattr(kv_cache, "SLOT_MULTIPLE", 1)
    moves = []
    fit = kv_cache.CacheLayout._fit
    monkeypatch.setattr(kv_cache.CacheLayout, "_fit", lambda self, *a: moves.append(fit(self, *a)) or moves[-1])
    settings = [GenerationSettings(max_new_tokens=3 + (7 * i) % 13) for i in range(len(prompts))]
    expected = [reference(hf, p, s.max_new_tokens) for p, s in zip(prompts, settings, strict=True)]
    seqs, _ = run_engine(hf, prompts, settings, max_batch_size=4)
    assert [s.output_ids for s in seqs] == expected
    assert sum(m is not None for m in moves) > len(moves) / 2


def test_backend_text_matches_the_causal_lm_wrapper_with_stop_strings(hf: HF) -> None:
    settings = [GenerationSettings(max_new_tokens=20 + i) for i in range(len(QUESTIONS))]
    chats = [[{"role": "system", "content": "Answer."}, {"role": "user", "content": q}] for q in QUESTIONS]
    lm = CausalLM(str(hf.args.pretrained), batch_size=3)
    full = lm.generate(chats, settings)
    # A stop string from the middle of one reply, and one that never occurs.
    text = next(t for t in full if len(t) >= 8)
    stop = next(text[i:i + 2] for i in range(2, len(text) - 1)
                if text[i:i + 2].isprintable() and "\ufffd" not in text[i:i + 2])
    stopped = [GenerationSettings(max_new_tokens=s.max_new_tokens, stop=(stop, "\x00never")) for s in settings]
    responses = hf.generate([request(i, q, s) for i, (q, s) in enumerate(zip(QUESTIONS, stopped, strict=True))])
    assert [r.error for r in responses] == [None] * len(QUESTIONS)
    assert [r.text for r in responses] == lm.generate(chats, stopped)
    assert any(r.text == text[: text.find(stop)] for r in responses)
    assert all(stop not in r.text for r in responses)
    assert responses[0].usage["prompt_tokens"] == len(lm.chat_ids(chats[0]))


def test_sampling_is_seeded_per_request(hf: HF) -> None:
    def sample(seed: int) -> GenerationSettings:
        return GenerationSettings(max_new_tokens=12, temperature=1.0, top_p=0.9, seed=seed)

    alone = hf.generate([request(0, QUESTIONS[0], sample(1))])[0].text
    batched = hf.generate([request(1, QUESTIONS[2], GenerationSettings()), request(2, QUESTIONS[0], sample(1)),
                           request(3, QUESTIONS[0], sample(2)), request(4, QUESTIONS[4], sample(1))])
    assert batched[1].text == alone
    assert batched[2].text != alone


def test_image_requests_get_an_error_and_the_others_an_answer(hf: HF) -> None:
    image = Image.new("RGB", (8, 8))
    requests = [request(0, QUESTIONS[0], GenerationSettings(max_new_tokens=4)),
                Request(id="img", kind="generate", messages=messages("What is this?", image))]
    responses = hf.generate(requests)
    assert responses[0].error is None and responses[0].text
    assert responses[1].text is None
    assert responses[1].error == "hf backend: LlamaForCausalLM is a text-only model; it cannot take image inputs"
    scored = hf.loglikelihood([Request(id="img", kind="loglikelihood", messages=messages("?", image),
                                       continuations=("cat",))])
    assert scored[0].error == responses[1].error and scored[0].logprobs is None


def test_max_new_tokens_zero_gives_empty_text(hf: HF) -> None:
    responses = hf.generate([request(0, QUESTIONS[0], GenerationSettings(max_new_tokens=0)),
                             request(1, QUESTIONS[1], GenerationSettings(max_new_tokens=3))])
    assert responses[0].text == "" and responses[0].usage["completion_tokens"] == 0
    assert responses[1].usage["completion_tokens"] == 3


def test_loglikelihood_is_the_causal_lm_shared_context_scoring(hf: HF) -> None:
    continuations = ("cat", " dog", "The cat sat on the mat.", "")
    response = hf.loglikelihood([Request(id="l", kind="loglikelihood", messages=messages(QUESTIONS[4]),
                                         continuations=continuations)])[0]
    chat = [{"role": "system", "content": "Answer."}, {"role": "user", "content": QUESTIONS[4]}]
    assert (response.logprobs, response.is_greedy) == hf.lm.loglikelihood(chat, list(continuations))
    assert response.logprobs[-1] == 0.0 and response.logprobs[0] < 0


def test_the_stream_answers_each_request_without_reading_the_whole_task_first(hf: HF) -> None:
    """A run checkpoints as answers come: scoring requests are answered one by one, and the engine
    reads generation requests only a window ahead of what it has finished."""
    pulled: list[str] = []

    def source(kind: str, n: int) -> Iterator[Request]:
        for i in range(n):
            pulled.append(f"{kind}{i}")
            yield Request(id=f"{kind}{i}", kind=kind, messages=messages(QUESTIONS[i % len(QUESTIONS)]),
                          generation=GenerationSettings(max_new_tokens=2), continuations=("yes", "no"))

    answers = hf.respond(source("loglikelihood", 50), batch_size=50)
    assert next(answers).request_id == "loglikelihood0" and pulled == ["loglikelihood0"]
    pulled.clear()
    answers = hf.respond(source("generate", 50), batch_size=50)
    next(answers)
    assert len(pulled) <= 2 * hf.args.max_batch_size
    assert len(list(answers)) == 49


def test_a_failing_batch_is_retried_one_by_one(hf: HF, monkeypatch: pytest.MonkeyPatch) -> None:
    prefill = hf.engine.runner.prefill

    def fail_on_long(seqs: list[Sequence]) -> torch.Tensor:
        if any(len(s.prompt_ids) > 60 for s in seqs):
            raise RuntimeError("out of memory")
        return prefill(seqs)

    monkeypatch.setattr(hf.engine.runner, "prefill", fail_on_long)
    responses = hf.generate([request(i, q, GenerationSettings(max_new_tokens=4)) for i, q in enumerate(QUESTIONS)])
    failed = [r.error for r in responses if r.error]
    assert failed and all(e == "generation failed: RuntimeError: out of memory" for e in failed)
    assert sum(r.text is not None for r in responses) == len(QUESTIONS) - len(failed) > 0


def test_fingerprint_and_bad_arguments(hf: HF, tiny_lm_dir: Path) -> None:
    fp = hf.fingerprint()
    assert fp["model"] == "hf" and fp["lm"]["lm"] == str(tiny_lm_dir)
    assert "max_batch_size" not in fp["settings"] and fp == hf.fingerprint()
    with pytest.raises(ConfigError, match="pretrained"):
        MODELS.get("hf").from_args({})
    with pytest.raises(ConfigError, match="max_batch_size"):
        MODELS.get("hf").from_args({"pretrained": str(tiny_lm_dir), "max_batch_size": "0"})
    with pytest.raises(ConfigError, match="attn_implementation"):
        MODELS.get("hf").from_args({"pretrained": str(tiny_lm_dir), "attn_implementation": "nonsense"})
    with pytest.raises(ConfigError, match="device 'gpu'"):
        MODELS.get("hf").from_args({"pretrained": str(tiny_lm_dir), "device": "gpu"})


@pytest.mark.gpu
def test_on_cuda_the_backend_answers_as_on_the_cpu(hf: HF, tiny_lm_dir: Path) -> None:
    cuda = MODELS.get("hf").from_args({"pretrained": str(tiny_lm_dir), "max_batch_size": "4", "device": "cuda"})
    requests = [request(i, q, GenerationSettings(max_new_tokens=12)) for i, q in enumerate(QUESTIONS)]
    assert [r.text for r in cuda.generate(requests)] == [r.text for r in hf.generate(requests)]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_asking_for_cuda_without_one_is_a_one_line_error(tiny_lm_dir: Path) -> None:
    with pytest.raises(ConfigError, match="device 'cuda' asked for, but torch sees no CUDA device"):
        MODELS.get("hf").from_args({"pretrained": str(tiny_lm_dir), "device": "cuda"})


def test_docs_are_prepared_beside_the_model_only_where_its_threads_leave_cores_free(
    hf: HF, monkeypatch: pytest.MonkeyPatch
) -> None:
    cores = available_cores()
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setattr(torch, "get_num_threads", lambda: cores)
    assert not hf.overlaps_input_work()  # every core multiplies matrices: prepare while the engine waits
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert hf.overlaps_input_work() == (cores > 1)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(cores))  # one rank per core (--num_processes)
    assert not hf.overlaps_input_work()
