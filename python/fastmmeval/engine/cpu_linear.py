"""Linear layers through oneDNN on CPU.

PyTorch's CPU `nn.Linear` calls MKL's GEMM, which on this project's machines (AMD EPYC with
AVX-512) runs 10-25% below oneDNN's inner product on prefill shapes and up to 2x below it on
decode shapes (a few rows against a large weight), where MKL repacks the weight on every call.
`use_onednn_linear` switches a loaded model's linear layers to oneDNN's inner product
(`torch.ops.mkldnn._linear_pointwise`, the op PyTorch's own compiler emits for CPU linears), with
the weight reordered once into oneDNN's blocked layout when `packed` (an extra copy of the weights;
without it oneDNN reorders per call, which still beats MKL on most shapes).

The products equal MKL's up to float rounding (another summation order), like any change of batch
shape: greedy outputs are the same unless two logits tie to the last bits. Each layer is switched
only after a check on a random input shows its output within `RTOL` of `nn.Linear`'s, and only for
weights on the CPU in float32 or bfloat16 (oneDNN has no float16 inner product on most CPUs).
"""

from __future__ import annotations

import logging
import os

import torch
import torch.nn.functional as F
from torch import nn

logger = logging.getLogger(__name__)

# Largest difference from nn.Linear allowed at the load-time check, relative to the largest output.
RTOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}
# Packed copies may take at most this share of the machine's memory; above it the weights stay
# unpacked (no extra memory, oneDNN reorders them per call).
PACKED_MEMORY_SHARE = 0.1


class OneDNNLinear(nn.Linear):
    """An nn.Linear computed by oneDNN's inner product, on a weight reordered once (`packed`) or
    as stored. Reorder again (`use_onednn_linear`) after changing the weight in place."""

    packed: torch.Tensor | None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.packed if self.packed is not None else self.weight
        return torch.ops.mkldnn._linear_pointwise(x, weight, self.bias, "none", [], "")


def onednn_available() -> bool:
    """Whether this torch build has oneDNN's linear op."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def use_onednn_linear(model: nn.Module, packed: bool | None = None) -> int:
    """Switch `model`'s CPU linear layers (float32 or bfloat16, each checked against nn.Linear on
    a random input) to `OneDNNLinear`; `packed` None packs when the copies fit in
    `PACKED_MEMORY_SHARE` of this machine's memory. Returns the number of layers switched."""
    if not onednn_available():
        return 0
    linears = [m for m in model.modules() if isinstance(m, nn.Linear) and _supported(m)]
    if packed is None:
        packed = sum(m.weight.numel() * m.weight.element_size() for m in linears) <= PACKED_MEMORY_SHARE * _memory()
    switched = 0
    with torch.inference_mode():
        for module in linears:
            weight = torch.ops.mkldnn._reorder_linear_weight(module.weight, None) if packed else None
            if not _agrees(module, weight):
                continue
            module.__class__ = OneDNNLinear
            module.packed = weight
            switched += 1
    logger.info("oneDNN linear: %d of %d linear layers (%s weights)", switched, len(linears),
                "packed" if packed else "unpacked")
    return switched


def restore_linear(model: nn.Module) -> None:
    """Undo `use_onednn_linear`: every OneDNNLinear becomes a plain nn.Linear again."""
    for module in model.modules():
        if isinstance(module, OneDNNLinear):
            module.__class__ = nn.Linear
            del module.packed


def _supported(module: nn.Linear) -> bool:
    w = module.weight
    return w.device.type == "cpu" and w.dtype in RTOL and w.layout == torch.strided and w.dim() == 2


def _agrees(module: nn.Linear, weight: torch.Tensor | None) -> bool:
    """Whether oneDNN's product with `weight` (the module's own when None) matches nn.Linear's on
    a random input."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(3, module.in_features, generator=generator).to(module.weight.dtype)
    try:
        got = torch.ops.mkldnn._linear_pointwise(x, module.weight if weight is None else weight, module.bias,
                                                  "none", [], "")
    except RuntimeError:
        return False
    want = F.linear(x, module.weight, module.bias)
    scale = want.abs().max().float().clamp(min=1e-30)
    return got.shape == want.shape and bool((got.float() - want.float()).abs().max() <= RTOL[want.dtype] * scale)


def _memory() -> float:
    """This machine's physical memory in bytes."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0.0

