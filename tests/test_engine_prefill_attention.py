"""Row-by-row prefill attention (`fastmmeval.engine.prefill_attention`): installed at load where a
probe prefill agrees with transformers' SDPA, used only in the engine's generation prefills (each
row causal over its own tokens, the final layer from the last position only when pruning), and
greedy outputs the same as with SDPA."""

from __future__ import annotations

import types
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image
from test_causal_lm import QUESTIONS
from test_vlm import _requests, photos  # noqa: F401  (photos is a fixture)
from vlm_fixtures import BUILDERS

from fastmmeval.engine import prefill_attention
from fastmmeval.engine.engine import Engine
from fastmmeval.engine.pruning import decoder_layers
from fastmmeval.models.local.causal_lm import CausalLM
from fastmmeval.models.local.vlm import VisionLanguageModel
from fastmmeval.protocol import GenerationSettings

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class CountingSDPA:
    """Counts the row-by-row calls (causal ones, and last-position ones) that go through it."""

    def __init__(self) -> None:
        self.causal = self.last = 0

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        if kwargs.get("is_causal"):
            self.causal += 1
        elif q.shape[2] == 1:
            self.last += 1
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> CountingSDPA:
    spy = CountingSDPA()
    monkeypatch.setattr(prefill_attention, "F", types.SimpleNamespace(scaled_dot_product_attention=spy))
    return spy


def _generate(lm: CausalLM, n: int = 6) -> list[list[int]]:
    chats = [[{"role": "user", "content": q * (1 + i % 3)}] for i, q in enumerate((QUESTIONS * 2)[:n])]
    settings = [GenerationSettings(max_new_tokens=3 + (5 * i) % 9) for i in range(n)]
    ids = [lm.chat_ids(c) for c in chats]
    return [s.output_ids for s in lm.engine.generate([(i, g, None) for i, g in zip(ids, settings, strict=True)])]


def test_text_lm_prefills_row_by_row_with_the_same_outputs(tiny_lm_dir: Path, counting: CountingSDPA) -> None:
    rows, plain = CausalLM(str(tiny_lm_dir), batch_size=4), CausalLM(str(tiny_lm_dir), batch_size=4)
    assert prefill_attention.is_installed(rows.model)
    plain.model.set_attn_implementation("sdpa")
    outs = _generate(rows)
    assert counting.causal > 0 and counting.last > 0  # layer 1 causal per row, the final layer from the last position
    calls = (counting.causal, counting.last)
    assert _generate(plain) == outs and sum(len(o) for o in outs) > 20
    assert (counting.causal, counting.last) == calls  # SDPA's own path never comes here
    chat = [{"role": "user", "content": QUESTIONS[0]}]
    assert rows.loglikelihood(chat, ["cat", "a dog"]) == plain.loglikelihood(chat, ["cat", "a dog"])
    assert (counting.causal, counting.last) == calls  # scoring reads every position: SDPA as is


def test_without_pruning_the_final_layer_attends_from_every_position(tiny_lm_dir: Path,
                                                                     counting: CountingSDPA) -> None:
    lm = CausalLM(str(tiny_lm_dir), batch_size=4, prune=False)
    assert prefill_attention.is_installed(lm.model)
    _generate(lm)
    assert counting.causal > 0 and counting.last == 0


def test_a_probe_that_disagrees_keeps_sdpa(tiny_lm_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("fastmmeval.engine.probe.LOGITS_RTOL", -1.0)  # no difference is small enough
    lm = CausalLM(str(tiny_lm_dir))
    assert not prefill_attention.is_installed(lm.model)
    assert lm.model.config._attn_implementation == "sdpa"


def test_eager_attention_is_left_alone(tiny_lm_dir: Path) -> None:
    lm = CausalLM(str(tiny_lm_dir))
    lm.model.set_attn_implementation("eager")
    layers = decoder_layers(lm.model)
    assert not prefill_attention.install(lm.model, [[5, 6, 7], [5]], lm.pad_id, layers[-1].self_attn)
    assert lm.model.config._attn_implementation == "eager"


@pytest.mark.parametrize("mask, lengths", [
    ([[0, 1, 1], [1, 1, 1]], [2, 3]),
    ([[1, 1, 0], [1, 1, 1]], None),  # right padding
    ([[0, 1, 0], [1, 1, 1]], None),  # a hole
    ([[0, 0, 0], [1, 1, 1]], None),  # an empty row
])
def test_only_left_padded_prefills_go_row_by_row(mask: list[list[int]], lengths: list[int] | None) -> None:
    assert prefill_attention._left_padded_lengths(torch.tensor(mask)) == lengths


@pytest.mark.parametrize("arch", ["llava", "qwen2_vl", "idefics3"])
def test_vlm_outputs_are_the_same_as_with_sdpa(arch: str, tmp_path: Path, photos: list[Image.Image],  # noqa: F811
                                               counting: CountingSDPA) -> None:
    folder = BUILDERS[arch](tmp_path / arch)
    rows, plain = VisionLanguageModel(str(folder)), VisionLanguageModel(str(folder))
    assert prefill_attention.is_installed(rows.model)
    plain.model.set_attn_implementation("sdpa")
    requests = [replace(r, generation=GenerationSettings(max_new_tokens=3 + (5 * i) % 9))
                for i, r in enumerate(_requests(photos)[:8])]  # text-only and 1-2 images, mixed lengths
    prompts = [rows.prompt(r) for r in requests]
    outs = []
    for vlm in (rows, plain):
        engine = Engine(vlm.model, vlm.eos_ids, partial(vlm.tokenizer.decode, skip_special_tokens=True),
                        lambda seqs, vlm=vlm: vlm.collate([s.inputs for s in seqs]), max_batch_size=4)
        outs.append([s.output_ids for s in engine.generate([(p.ids, r.generation, p)
                                                             for p, r in zip(prompts, requests, strict=True)])])
    assert outs[0] == outs[1] and sum(len(o) for o in outs[0]) > 20
    assert counting.causal > 0 and counting.last > 0
