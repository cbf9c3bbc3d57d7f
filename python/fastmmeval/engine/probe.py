"""The probe prefill that load-time checks run: its text, its inputs, and how close its logits must
come to the unchanged model's."""

from __future__ import annotations

from typing import Any

import torch

from fastmmeval.engine.tensors import left_pad

# Relative tolerance (of the largest logit) for the last-position logits at the load-time check:
# one position run alone may take a different matrix-multiply path than the same row in a batch.
LOGITS_RTOL = 1e-5
# Text the load-time checks prefill (any plain text: only its token ids matter).
PROBE_TEXT = "Describe the picture in a few words. Is there a cat, a dog or a person? Answer yes or no."


def probe_inputs(model: Any, prompts: list[list[int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Left-padded prefill inputs for `prompts`, positions counting real tokens (as the engine's)."""
    ids, mask = left_pad(prompts, pad_id)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    device = getattr(model, "device", torch.device("cpu"))
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device), "position_ids": positions.to(device)}
