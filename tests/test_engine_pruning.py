"""Load-time pruning (`fastmmeval.engine.pruning`) on tiny random-weight models: unread vision
layers are dropped only where the image features stay exactly equal, the final decoder layer runs
its MLP and output projection on the last position only in the engine's prefills (never in
scoring), and greedy outputs, log-likelihoods and fingerprints are the same with and without it."""

from __future__ import annotations

import copy
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

from fastmmeval.engine.engine import Engine
from fastmmeval.engine.pruning import (
    decoder_layers,
    install_last_position_prefill,
    last_position_only,
    prune_vision_tower,
)
from fastmmeval.engine.runner import Batch, Runner, token_prefill
from fastmmeval.engine.sequence import Sequence
from fastmmeval.models.local.causal_lm import CausalLM
from fastmmeval.models.local.vlm import VisionLanguageModel
from fastmmeval.protocol import GenerationSettings
from fastmmeval.testing.random_init import draw_large_weights

pytestmark = pytest.mark.usefixtures("one_torch_thread")

VLM_ARCHS = ["llava", "qwen2_vl", "idefics3"]
OPTIONS = ["cat", "a dog sat on the mat", "Yes", "0 1 2 3"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {arch: BUILDERS[arch](tmp_path_factory.mktemp(arch)) for arch in VLM_ARCHS}


def _hooks(model: Any) -> Any:
    return getattr(model, "_fastmmeval_last_position", None)


def _pixels(model: Any, seed: int) -> torch.Tensor:
    size = model.config.vision_config.image_size
    return torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(seed))


def _features(model: Any, pixels: torch.Tensor) -> list[torch.Tensor]:
    with torch.inference_mode():
        return list(model.get_image_features(pixel_values=pixels).pooler_output)


def _tiny_llava(vision: str, layers: int, feature_layer: int | list[int]) -> Any:
    """An in-memory LLaVA with a CLIP or SigLIP tower of `layers` layers."""
    from transformers import CLIPVisionConfig, LlavaConfig, LlavaForConditionalGeneration, SiglipVisionConfig

    kind = CLIPVisionConfig if vision == "clip" else SiglipVisionConfig
    tower = kind(hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
                 image_size=32, patch_size=8)
    text = dict(model_type="llama", vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2)
    config = LlavaConfig(vision_config=tower.to_dict(), text_config=text, image_token_index=63,
                         vision_feature_layer=feature_layer,
                         vision_feature_select_strategy="default" if vision == "clip" else "full")
    model = LlavaForConditionalGeneration(config).eval()
    draw_large_weights(model, seed=5)
    return model


# ----- vision tower ----------------------------------------------------------------------------


def test_llava_fixture_drops_the_unread_last_clip_layer(folders: dict[str, Path]) -> None:
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(folders["llava"]).eval()
    assert model.config.vision_feature_layer == -2 and len(model.model.vision_tower.encoder.layers) == 2
    pixels = _pixels(model, seed=7)
    before = _features(model, pixels)
    assert prune_vision_tower(model) == 1
    assert len(model.model.vision_tower.encoder.layers) == 1
    assert model.config.vision_feature_layer == 1
    assert model.config.vision_config.num_hidden_layers == 1
    after = _features(model, pixels)  # another image than the load check's
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert prune_vision_tower(model) == 0  # nothing left to drop


@pytest.mark.parametrize(("selection", "dropped", "rewritten"), [([-2, -5], 1, [5, 2]), ([-5, -3], 2, [2, 4]),
                                                                 (-1, 0, -1), (3, 3, 3)])
def test_a_list_of_feature_layers_keeps_up_to_the_deepest(selection: Any, dropped: int, rewritten: Any) -> None:
    model = _tiny_llava("clip", layers=6, feature_layer=selection)
    pixels = _pixels(model, seed=8)
    before = _features(model, pixels)
    assert prune_vision_tower(model) == dropped
    assert len(model.model.vision_tower.encoder.layers) == 6 - dropped
    assert model.config.vision_feature_layer == rewritten
    assert all(torch.equal(a, b) for a, b in zip(before, _features(model, pixels), strict=True))


def test_a_tower_whose_last_hidden_state_is_normed_is_left_whole() -> None:
    """SigLIP applies post_layernorm to last_hidden_state; a tower that ties that into
    hidden_states[-1] would give a different hidden state once truncated, so the check refuses."""
    model = _tiny_llava("siglip", layers=3, feature_layer=-2)
    model.config.vision_config.tie_last_hidden_states = True
    layers = model.model.vision_tower.encoder.layers
    assert prune_vision_tower(model) == 0
    assert model.model.vision_tower.encoder.layers is layers and len(layers) == 3
    assert model.config.vision_feature_layer == -2 and model.config.vision_config.num_hidden_layers == 3
    _features(model, _pixels(model, seed=9))  # still runs as before
    # Untied (SigLIP's own setting), the same tower is pruned.
    model.config.vision_config.tie_last_hidden_states = False
    assert prune_vision_tower(model) == 1


def test_a_failing_equality_check_restores_the_tower(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _tiny_llava("clip", layers=4, feature_layer=-2)
    layers = model.model.vision_tower.encoder.layers
    calls = {"n": 0}
    real = type(model).get_image_features

    def off_by_a_bit(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = real(self, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] > 1:  # the truncated tower's run
            out.pooler_output = [f + 1e-6 for f in out.pooler_output]
        return out

    monkeypatch.setattr(type(model), "get_image_features", off_by_a_bit)
    assert prune_vision_tower(model) == 0
    assert calls["n"] == 2
    assert model.model.vision_tower.encoder.layers is layers
    assert model.config.vision_feature_layer == -2 and model.config.vision_config.num_hidden_layers == 4


@pytest.mark.parametrize("arch", ["qwen2_vl", "idefics3"])
def test_towers_without_a_feature_layer_are_not_touched(folders: dict[str, Path], arch: str) -> None:
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(folders[arch]).eval()
    params = sum(p.numel() for p in model.parameters())
    assert prune_vision_tower(model) == 0
    assert sum(p.numel() for p in model.parameters()) == params


# ----- final layer on the last position --------------------------------------------------------


def test_final_layer_runs_on_the_last_position_in_prefill_only(tiny_lm_dir: Path) -> None:
    lm = CausalLM(str(tiny_lm_dir), batch_size=4)
    hooks = _hooks(lm.model)
    assert hooks is not None and hooks.names == ["mlp", "self_attn.o_proj", "self_attn.q_proj"]
    seen: dict[str, list[int]] = {"mlp": [], "q_proj": [], "k_proj": []}
    layer = decoder_layers(lm.model)[-1]
    modules = {"mlp": layer.mlp, "q_proj": layer.self_attn.q_proj, "k_proj": layer.self_attn.k_proj}
    spies = [module.register_forward_pre_hook(lambda module, args, name=name: seen[name].append(args[0].shape[1]))
             for name, module in modules.items()]
    try:
        lm.generate([[{"role": "user", "content": q}] for q in QUESTIONS[:3]],
                    [GenerationSettings(max_new_tokens=3)] * 3)
        # Prefill: the last position only (decode: one anyway), but keys for every position.
        assert set(seen["mlp"]) == set(seen["q_proj"]) == {1} and max(seen["k_proj"]) > 1
        assert hooks.sliced >= 3
        sliced = hooks.sliced
        for spied in seen.values():
            spied.clear()
        lm.loglikelihood([{"role": "user", "content": QUESTIONS[0]}], OPTIONS)
        assert min(max(spied) for spied in seen.values()) > 1 and hooks.sliced == sliced  # scoring reads all
    finally:
        for spy in spies:
            spy.remove()


class PositionMixingMLP(torch.nn.Module):
    """An MLP whose output at a position depends on earlier positions (not position-wise)."""

    def __init__(self, mlp: torch.nn.Module) -> None:
        super().__init__()
        self.mlp = mlp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x).cumsum(1)


class TupleMLP(torch.nn.Module):
    """An MLP returning (output, router logits), as some mixture-of-experts layers do."""

    def __init__(self, mlp: torch.nn.Module) -> None:
        super().__init__()
        self.mlp = mlp

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.mlp(x), x[..., :1]


def _lm_model(tiny_lm_dir: Path) -> tuple[Any, list[list[int]], int]:
    lm = CausalLM(str(tiny_lm_dir), prune=False)
    assert _hooks(lm.model) is None
    probe = lm.text_ids(QUESTIONS[4])
    return lm.model, [probe, probe[:7]], lm.pad_id


def test_load_check_refuses_a_layer_that_changes_the_logits(tiny_lm_dir: Path) -> None:
    model, prompts, pad = _lm_model(tiny_lm_dir)
    layer = decoder_layers(model)[-1]
    layer.mlp = PositionMixingMLP(layer.mlp)
    assert install_last_position_prefill(model, prompts, pad) == []
    assert _hooks(model) is None
    assert not layer.mlp._forward_hooks and not layer.mlp._forward_pre_hooks
    assert not layer.self_attn.o_proj._forward_hooks


def test_load_check_refuses_when_the_logits_differ(tiny_lm_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, prompts, pad = _lm_model(tiny_lm_dir)
    monkeypatch.setattr("fastmmeval.engine.probe.LOGITS_RTOL", -1.0)  # nothing is close enough
    assert install_last_position_prefill(model, prompts, pad) == []
    assert _hooks(model) is None


def _moe_style_forward(self: Any, hidden_states: torch.Tensor, attention_mask: Any = None, position_ids: Any = None,
                       cache: Any = None, use_cache: bool = False, position_embeddings: Any = None,
                       **kwargs: Any) -> torch.Tensor:
    """LlamaDecoderLayer.forward taking the first element of an MLP that returns a tuple."""
    residual = hidden_states
    hidden_states, _ = self.self_attn(hidden_states=self.input_layernorm(hidden_states),
                                      attention_mask=attention_mask, position_ids=position_ids, cache=cache,
                                      use_cache=use_cache, position_embeddings=position_embeddings, **kwargs)
    hidden_states = residual + hidden_states
    out = self.mlp(self.post_attention_layernorm(hidden_states))
    return hidden_states + (out[0] if isinstance(out, tuple) else out)


def test_an_mlp_returning_a_tuple_is_skipped_and_the_projection_kept(
        tiny_lm_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, prompts, pad = _lm_model(tiny_lm_dir)
    layer = decoder_layers(model)[-1]
    inputs = {"input_ids": torch.tensor([prompts[0]])}
    with torch.inference_mode():
        expected = model(**inputs).logits
    # In a Llama layer, a tuple cannot be added to the residual: the probe fails, nothing is hooked.
    layer.mlp = TupleMLP(layer.mlp)
    assert install_last_position_prefill(model, prompts, pad) == []
    # In a layer made for it (as mixture-of-experts layers are), only the projection is hooked.
    monkeypatch.setattr(type(layer), "forward", _moe_style_forward)
    assert install_last_position_prefill(model, prompts, pad) == ["self_attn.o_proj", "self_attn.q_proj"]
    with torch.inference_mode():
        assert torch.equal(model(**inputs).logits, expected)
        with last_position_only(model):
            hooked = model(**inputs, logits_to_keep=1).logits[:, -1]
    assert torch.allclose(hooked, expected[:, -1], rtol=0, atol=1e-4)
    assert _hooks(model).sliced == 4  # probe check, then this prefill: the two projections only


def test_layers_without_the_submodules_are_skipped(tiny_lm_dir: Path) -> None:
    model, prompts, pad = _lm_model(tiny_lm_dir)
    layer = decoder_layers(model)[-1]
    o_proj, mlp = layer.self_attn.o_proj, layer.mlp
    del layer.self_attn.o_proj
    layer.self_attn.o_proj = lambda x: o_proj(x)  # a plain function: nothing to hook
    assert install_last_position_prefill(model, prompts, pad) == ["mlp"]  # every query is read now
    del layer.mlp
    layer.mlp = lambda x: mlp(x)
    assert install_last_position_prefill(model, prompts, pad) == []
    assert _hooks(model) is None


# ----- same outputs through the engine ---------------------------------------------------------


def test_text_lm_generation_and_scores_are_unchanged(tiny_lm_dir: Path) -> None:
    pruned, plain = CausalLM(str(tiny_lm_dir), batch_size=4), CausalLM(str(tiny_lm_dir), batch_size=4, prune=False)
    assert _hooks(pruned.model) is not None and _hooks(plain.model) is None
    chats = [[{"role": "user", "content": q * (1 + i % 3)}] for i, q in enumerate(QUESTIONS * 2)]
    settings = [GenerationSettings(max_new_tokens=4 + (5 * i) % 9) for i in range(len(chats))]
    ids = [pruned.chat_ids(c) for c in chats]
    outs = [[s.output_ids for s in lm.engine.generate([(i, g, None) for i, g in zip(ids, settings, strict=True)])]
            for lm in (pruned, plain)]
    assert outs[0] == outs[1]
    assert sum(len(o) for o in outs[0]) > 40 and len({tuple(o) for o in outs[0]}) > 4
    assert _hooks(pruned.model).sliced > 2  # the engine's prefills ran hooked
    for chat in chats[:3]:
        assert pruned.loglikelihood(chat, OPTIONS) == plain.loglikelihood(chat, OPTIONS)
    assert pruned.fingerprint() == plain.fingerprint()


def _vlm_engine(vlm: VisionLanguageModel) -> Engine:
    return Engine(vlm.model, vlm.eos_ids, partial(vlm.tokenizer.decode, skip_special_tokens=True),
                  lambda seqs: vlm.collate([s.inputs for s in seqs]), max_batch_size=4)


@pytest.mark.parametrize("arch", VLM_ARCHS)
def test_vlm_generation_and_scores_are_unchanged(folders: dict[str, Path], arch: str,
                                                 photos: list[Image.Image]) -> None:  # noqa: F811
    pruned, plain = VisionLanguageModel(str(folders[arch])), VisionLanguageModel(str(folders[arch]), prune=False)
    assert _hooks(pruned.model).names == ["mlp", "self_attn.o_proj", "self_attn.q_proj"]
    assert _hooks(plain.model) is None
    if arch == "llava":
        assert len(pruned.model.model.vision_tower.encoder.layers) == 1
        assert len(plain.model.model.vision_tower.encoder.layers) == 2
    requests = [replace(r, generation=GenerationSettings(max_new_tokens=3 + (5 * i) % 9))
                for i, r in enumerate(_requests(photos)[:10])]  # text-only and 1-2 images, mixed lengths
    prompts = [pruned.prompt(r) for r in requests]
    outs = []
    for vlm in (pruned, plain):
        seqs = _vlm_engine(vlm).generate([(p.ids, r.generation, p) for p, r in zip(prompts, requests, strict=True)])
        outs.append([s.output_ids for s in seqs])
    assert outs[0] == outs[1]
    assert sum(len(o) for o in outs[0]) > 20 and len({tuple(o) for o in outs[0]}) > 3
    assert _hooks(pruned.model).sliced > 2
    for request in requests[:4]:
        assert pruned.loglikelihood(request, OPTIONS) == plain.loglikelihood(request, OPTIONS)
    assert pruned.fingerprint() == plain.fingerprint()


def test_a_prefill_whose_rows_do_not_all_end_in_the_last_column_runs_unhooked(tiny_lm_dir: Path) -> None:
    lm = CausalLM(str(tiny_lm_dir))
    hooks = _hooks(lm.model)
    prompts = [Sequence(i, lm.chat_ids([{"role": "user", "content": q}]), GenerationSettings())
               for i, q in enumerate(QUESTIONS[:2])]
    sliced = hooks.sliced
    Runner(lm.model, partial(token_prefill, pad_id=lm.pad_id)).prefill(prompts)
    assert hooks.sliced == sliced + 3

    def right_padded(seqs: list[Sequence]) -> Batch:
        batch = token_prefill(seqs, lm.pad_id)
        batch.inputs["attention_mask"] = batch.inputs["attention_mask"].flip(-1)
        return batch

    Runner(lm.model, right_padded).prefill(prompts)
    assert hooks.sliced == sliced + 3


def test_a_deep_copy_of_a_hooked_model_stays_hooked(tiny_lm_dir: Path) -> None:
    model = CausalLM(str(tiny_lm_dir)).model
    twin = copy.deepcopy(model)
    ids = {"input_ids": torch.tensor([[5, 6, 7, 8, 9]])}
    with torch.inference_mode():
        expected = model(**ids).logits
        assert torch.equal(twin(**ids).logits, expected)
        sliced = _hooks(twin).sliced
        with last_position_only(twin):
            hooked = twin(**ids, logits_to_keep=1).logits
    assert _hooks(twin).sliced == sliced + 3
    assert torch.allclose(hooked[:, -1], expected[:, -1], rtol=0, atol=1e-4)
