"""Tensor helpers the engine's modules share: left-padding token rows, and a model's KV cache under
either of its transformers names."""

from __future__ import annotations

import inspect
from typing import Any

import torch


def left_pad(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rows left-padded with `pad_id` to the longest: (input ids, attention mask)."""
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad_id] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask


def cache_keyword(model: Any) -> str:
    """The name under which `model.forward` takes a KV cache: transformers 5 renamed
    `past_key_values` to `cache`; accept either."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def cache_of(output: Any) -> Any:
    """The KV cache of a model output (under either name)."""
    return output["cache"] if "cache" in output else output["past_key_values"]
