"""Random weights for test and bench models that make clear greedy choices."""

from __future__ import annotations

import math
from typing import Any


def draw_large_weights(model: Any, seed: int, head_scale: float = 1.0) -> None:
    """Redraw (seeded) Linear and Conv weights with std 1/sqrt(fan_in), biases with std 0.1 and
    embeddings with std 1, and the output head with std head_scale/sqrt(fan_in). Default inits of
    a random model give near-tied logits, so greedy choices flip on float noise; at this scale the
    top two tokens stand well apart."""
    import torch

    torch.manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.normal_(0.0, 1.0 / math.sqrt(module.in_features))
                if module.bias is not None:
                    module.bias.normal_(0.0, 0.1)
            elif isinstance(module, torch.nn.Embedding):
                module.weight.normal_(0.0, 1.0)
            elif isinstance(module, torch.nn.Conv2d | torch.nn.Conv3d):
                module.weight.normal_(0.0, 1.0 / math.sqrt(module.weight[0].numel()))
        if head_scale != 1.0:
            head = model.get_output_embeddings()
            head.weight.normal_(0.0, head_scale / math.sqrt(head.in_features))
