"""CausalLM on a tiny random-weight Llama: batching, stopping and scoring against plain references."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fastmmeval.errors import ConfigError
from fastmmeval.models.local.causal_lm import CausalLM
from fastmmeval.protocol import GenerationSettings

QUESTIONS = [
    "What animal is in this image?",
    "Coffee is hot.",
    "The quick brown fox jumps over the lazy dog. " * 3,
    "Yes",
    "A rocket flew to the moon. What is in the image? Answer with one word: cat, dog, horse or bird.",
    "0 1 2 3 4 5 6 7 8 9",
]


def chat(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "Answer."}, {"role": "user", "content": question}]


@pytest.fixture(scope="module")
def lm(tiny_lm_dir: Path) -> CausalLM:
    return CausalLM(str(tiny_lm_dir), batch_size=4)


def reference_greedy(lm: CausalLM, messages: list[dict[str, str]], max_new_tokens: int) -> list[int]:
    """Greedy tokens by re-running the whole sequence each step (no cache, no padding)."""
    ids = lm.chat_ids(messages)
    out: list[int] = []
    with torch.inference_mode():
        for _ in range(max_new_tokens):
            token = int(lm.model(input_ids=torch.tensor([ids + out])).logits[0, -1].argmax())
            if token in lm.eos_ids:
                break
            out.append(token)
    return out


def greedy(max_new_tokens: int = 16, stop: tuple[str, ...] = ()) -> GenerationSettings:
    return GenerationSettings(max_new_tokens=max_new_tokens, stop=stop)


def test_greedy_matches_uncached_reference(lm: CausalLM) -> None:
    for n in (1, 5, 16):
        expected = [lm.tokenizer.decode(reference_greedy(lm, chat(q), n), skip_special_tokens=True)
                    for q in QUESTIONS]
        assert lm.generate([chat(q) for q in QUESTIONS], [greedy(n)] * len(QUESTIONS)) == expected
    assert sum(len(t) for t in expected) > 20  # the test means something only if text comes out


def test_greedy_is_batch_size_invariant(lm: CausalLM) -> None:
    prompts = [chat(q) for q in QUESTIONS]
    settings = [greedy(12 + i) for i in range(len(QUESTIONS))]
    one_by_one = [lm.generate([p], [s])[0] for p, s in zip(prompts, settings, strict=True)]
    for batch_size in (2, 4, 8):
        lm.batch_size = batch_size
        assert lm.generate(prompts, settings) == one_by_one
    lm.batch_size = 4


def test_max_new_tokens_zero_gives_empty_text(lm: CausalLM) -> None:
    assert lm.generate([chat(QUESTIONS[0]), chat(QUESTIONS[1])], [greedy(0), greedy(3)])[0] == ""


def test_stop_strings_cut_the_text_at_the_earliest_one(lm: CausalLM) -> None:
    full = lm.generate([chat(q) for q in QUESTIONS], [greedy(24)] * len(QUESTIONS))
    question, text = next((q, t) for q, t in zip(QUESTIONS, full, strict=True) if len(t) >= 8)
    stop = next(text[i:i + 2] for i in range(2, len(text) - 1) if text[i:i + 2].isprintable()
                and "\ufffd" not in text[i:i + 2])
    later = text[-1] if text[-1] not in stop else "\x00never"
    expected = text[: text.find(stop)]
    got = lm.generate([chat(question), chat(question)], [greedy(24, (stop,)), greedy(24, (later, stop))])
    assert got == [expected, expected]
    assert len(expected) < len(text)


def test_sampling_is_seeded_per_request(lm: CausalLM) -> None:
    def sample(seed: int) -> GenerationSettings:
        return GenerationSettings(max_new_tokens=12, temperature=1.0, top_p=0.9, seed=seed)

    alone = lm.generate([chat(QUESTIONS[0])], [sample(1)])
    batched = lm.generate([chat(QUESTIONS[2]), chat(QUESTIONS[0]), chat(QUESTIONS[0])],
                          [greedy(), sample(1), sample(2)])
    assert batched[1] == alone[0]
    assert batched[2] != alone[0]


def manual_loglikelihood(lm: CausalLM, messages: list[dict[str, str]],
                         continuation: str) -> tuple[float, bool]:
    context, cont = lm.chat_ids(messages), lm.text_ids(continuation)
    with torch.inference_mode():
        logits = lm.model(input_ids=torch.tensor([context + cont])).logits[0].float()
    dist = logits[len(context) - 1: -1].log_softmax(-1)
    tokens = torch.tensor(cont)
    return float(dist.gather(1, tokens[:, None]).sum()), bool((dist.argmax(-1) == tokens).all())


def test_loglikelihood_matches_full_sequence_computation(lm: CausalLM) -> None:
    messages = chat(QUESTIONS[4])
    continuations = ["cat", " dog", "The cat sat on the mat.", "horse or bird", "7", "rocket", "?"]
    logprobs, is_greedy = lm.loglikelihood(messages, continuations)
    assert len(logprobs) == len(is_greedy) == len(continuations)
    for cont, lp, g in zip(continuations, logprobs, is_greedy, strict=True):
        expected_lp, expected_greedy = manual_loglikelihood(lm, messages, cont)
        assert lp == pytest.approx(expected_lp, abs=1e-4)
        assert g == expected_greedy
        assert lp < 0


def test_loglikelihood_of_an_empty_continuation_is_zero(lm: CausalLM) -> None:
    assert lm.loglikelihood(chat("Yes"), ["", "cat"])[0][0] == 0.0
    assert lm.loglikelihood(chat("Yes"), [""]) == ([0.0], [True])


def test_is_greedy_is_true_for_the_greedy_decode(lm: CausalLM) -> None:
    messages = chat(QUESTIONS[0])
    tokens = reference_greedy(lm, messages, 6)
    # The longest greedy prefix whose text tokenizes back to the same ids.
    n = next(n for n in range(len(tokens), 0, -1) if lm.text_ids(lm.tokenizer.decode(tokens[:n])) == tokens[:n])
    text = lm.tokenizer.decode(tokens[:n])
    other = lm.tokenizer.decode(tokens[: n - 1] + [(tokens[n - 1] + 1) % 256 + 4])
    _, is_greedy = lm.loglikelihood(messages, [text, other])
    assert is_greedy == [True, False]


def test_fingerprint_names_the_model_and_is_stable(lm: CausalLM, tiny_lm_dir: Path) -> None:
    fp = lm.fingerprint()
    assert fp["lm"] == str(tiny_lm_dir)
    assert fp["dtype"] == "float32"
    assert fp["weight_files"] == {"model.safetensors": (tiny_lm_dir / "model.safetensors").stat().st_size}
    assert fp == lm.fingerprint()


def test_bad_settings_fail_with_one_line_config_errors(tiny_lm_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="dtype"):
        CausalLM(str(tiny_lm_dir), dtype="float8")
    with pytest.raises(ConfigError, match="cannot load causal LM"):
        CausalLM(str(tmp_path / "missing"))
