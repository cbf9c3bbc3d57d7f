"""Linear layers through oneDNN on CPU (`fastmmeval.engine.cpu_linear`): every layer is switched
after a load-time check, logits stay within float rounding of nn.Linear's, switching back restores
them bit for bit, and the `hf` backend gives the same greedy outputs and fingerprint with and
without it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from PIL import Image
from test_causal_lm import QUESTIONS
from test_vlm import _requests, photos  # noqa: F401  (photos is a fixture)
from torch import nn
from vlm_fixtures import BUILDERS

from fastmmeval.engine import cpu_linear
from fastmmeval.engine.cpu_linear import OneDNNLinear, restore_linear, use_onednn_linear
from fastmmeval.models import MODELS
from fastmmeval.models.local.causal_lm import CausalLM
from fastmmeval.protocol import GenerationSettings

pytestmark = [
    pytest.mark.usefixtures("one_torch_thread"),
    pytest.mark.skipif(not cpu_linear.onednn_available(), reason="this torch build has no oneDNN"),
]


def _logits(lm: CausalLM) -> torch.Tensor:
    ids = torch.tensor([lm.chat_ids([{"role": "user", "content": q}])[:12] for q in QUESTIONS[:3]])
    with torch.inference_mode():
        return lm.model(input_ids=ids).logits


def _linears(model: nn.Module) -> list[nn.Linear]:
    return [m for m in model.modules() if isinstance(m, nn.Linear)]


@pytest.mark.parametrize("packed", [True, False])
def test_every_layer_switches_and_logits_stay_within_float_rounding(tiny_lm_dir: Path, packed: bool) -> None:
    lm = CausalLM(str(tiny_lm_dir))
    before = _logits(lm)
    assert use_onednn_linear(lm.model, packed=packed) == len(_linears(lm.model))
    assert all(isinstance(m, OneDNNLinear) and (m.packed is not None) == packed for m in _linears(lm.model))
    after = _logits(lm)
    assert (after - before).abs().max() <= 1e-5 * before.abs().max()
    restore_linear(lm.model)
    assert not any(isinstance(m, OneDNNLinear) for m in lm.model.modules())
    assert torch.equal(_logits(lm), before)


def test_weights_stay_unpacked_when_their_copies_would_not_fit(tiny_lm_dir: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_linear, "PACKED_MEMORY_SHARE", 0.0)
    lm = CausalLM(str(tiny_lm_dir))
    assert use_onednn_linear(lm.model) > 0
    assert all(m.packed is None for m in _linears(lm.model))


def test_a_layer_that_fails_the_load_check_keeps_torchs_product(tiny_lm_dir: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(cpu_linear.RTOL, torch.float32, -1.0)  # no difference is small enough
    lm = CausalLM(str(tiny_lm_dir))
    assert use_onednn_linear(lm.model) == 0
    assert not any(isinstance(m, OneDNNLinear) for m in lm.model.modules())


def test_float16_layers_are_left_to_torch(tiny_lm_dir: Path) -> None:
    lm = CausalLM(str(tiny_lm_dir), dtype="float16")
    assert use_onednn_linear(lm.model) == 0


@pytest.mark.parametrize("arch", ["llava", "qwen2_vl", "idefics3"])
def test_hf_backend_outputs_and_fingerprint_are_the_same_without_it(
        arch: str, tmp_path: Path, photos: list[Image.Image]) -> None:  # noqa: F811
    folder = BUILDERS[arch](tmp_path / arch)
    fast, plain = (MODELS.get("hf").from_args({"pretrained": str(folder), "onednn": on}) for on in ("true", "false"))
    assert any(isinstance(m, OneDNNLinear) for m in fast.lm.model.modules())
    assert not any(isinstance(m, OneDNNLinear) for m in plain.lm.model.modules())
    requests = [replace(r, generation=GenerationSettings(max_new_tokens=3 + (5 * i) % 9))
                for i, r in enumerate(_requests(photos)[:8])]
    texts = [[r.text for r in hf.generate(requests)] for hf in (fast, plain)]
    assert texts[0] == texts[1] and len(set(texts[0])) > 3
    assert fast.fingerprint() == plain.fingerprint()
