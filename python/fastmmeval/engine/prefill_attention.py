"""Attention of the engine's generation prefills, row by row.

A prefill batch is left-padded: row r holds its `n_r` prompt tokens in the last `n_r` columns. The
model's SDPA attention runs over the whole padded square with a padding mask, so it computes
every masked-out score and cannot skip the causal upper triangle. Inside `rows_attention`, each
causal self-attention of the language model instead runs on each row's own tokens with
`is_causal=True` (the kernel skips the blocks above the diagonal), the computation `generate` does
for that prompt alone; and the final decoder layer, whose output is read at the last position only
(the prefill keeps that position's logits, and its keys and values were computed before attention),
attends from the last position only. Padded positions get zeros, which nothing reads.

Everything else (decode steps, log-likelihood scoring, vision towers, sliding-window or
attention-sink layers) goes to transformers' own SDPA function unchanged. The model must use
transformers' `sdpa` attention; `install` registers this function under `NAME` (with SDPA's mask
builder) and switches the model to it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fastmmeval.engine import probe

NAME = "fastmmeval_sdpa"


@dataclass(frozen=True)
class Rows:
    """A left-padded prefill: prompt tokens per row, padded width, and the attention module
    (the final decoder layer's, when only the last position's output is read) that attends from
    the last position only."""

    lengths: tuple[int, ...]
    width: int
    last_only: nn.Module | None


_ROWS: ContextVar[Rows | None] = ContextVar("fastmmeval_prefill_rows", default=None)
_FINAL_ATTR = "_fastmmeval_final_attention"


def install(model: Any, prompts: list[list[int]], pad_id: int, final_attention: nn.Module | None) -> bool:
    """Switch a model that uses transformers' `sdpa` attention to this module's attention
    (`final_attention`: the final decoder layer's self-attention module, to attend from the last
    position only; None to keep all of it), kept only if a probe prefill of `prompts` (plain text
    token ids, left-padded with `pad_id`) gives the same last-position logits as SDPA's, within
    `probe.LOGITS_RTOL` of the largest. Returns whether it was switched."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if getattr(getattr(model, "config", None), "_attn_implementation", None) != "sdpa" or not all(prompts):
        return False
    AttentionInterface.register(NAME, attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    inputs = probe.probe_inputs(model, prompts, pad_id)
    try:
        with torch.inference_mode():
            want = model(**inputs, logits_to_keep=1).logits[:, -1].float()
            model.set_attn_implementation(NAME)
            setattr(model, _FINAL_ATTR, final_attention)
            with rows_attention(model, inputs["attention_mask"], last_only=True):
                got = model(**inputs, logits_to_keep=1).logits[:, -1].float()
        same = bool((got - want).abs().max() <= probe.LOGITS_RTOL * want.abs().max())
    except (ValueError, KeyError, RuntimeError):
        same = False
    if not same:
        model.set_attn_implementation("sdpa")
        setattr(model, _FINAL_ATTR, None)
    return same


def is_installed(model: Any) -> bool:
    """Whether `install` switched this model."""
    return getattr(getattr(model, "config", None), "_attn_implementation", None) == NAME


@contextmanager
def rows_attention(model: Any, attention_mask: torch.Tensor | None, last_only: bool) -> Iterator[None]:
    """Within this context, the installed model's causal self-attention runs row by row over the
    prefill whose 2-D `attention_mask` is given (when every row is left-padded, its ones
    contiguous up to the last column), with the final layer attending from the last position when
    `last_only`. A no-op for a model without `install` or a mask of another shape."""
    lengths = _left_padded_lengths(attention_mask) if is_installed(model) else None
    if lengths is None:
        yield
        return
    assert attention_mask is not None
    rows = Rows(tuple(lengths), attention_mask.shape[1], getattr(model, _FINAL_ATTR, None) if last_only else None)
    token = _ROWS.set(rows)
    try:
        yield
    finally:
        _ROWS.reset(token)


def _left_padded_lengths(mask: torch.Tensor | None) -> list[int] | None:
    """Each row's number of ones, if every row is zeros then ones (ending in the last column)."""
    if mask is None or mask.dim() != 2 or mask.shape[1] == 0:
        return None
    lengths = mask.sum(-1)
    width = mask.shape[1]
    expected = torch.arange(width, device=mask.device)[None, :] >= (width - lengths)[:, None]
    if not torch.equal(mask.bool(), expected) or bool((lengths == 0).any()):
        return None
    return lengths.tolist()


def attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
              is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature ([batch, heads, length, dim] query, key and
    value; returns [batch, length, heads, dim]): row by row inside `rows_attention`, transformers'
    SDPA otherwise."""
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    rows = _ROWS.get()
    plain = (rows is not None and getattr(module, "is_causal", False) is True and is_causal is not False
             and dropout == 0.0 and kwargs.get("sliding_window") is None and kwargs.get("s_aux") is None
             and getattr(module, "sliding_window", None) is None and not module.training
             and query.shape[0] == len(rows.lengths) and query.shape[2] == key.shape[2] == rows.width)
    if not plain:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    assert rows is not None
    if key.shape[1] != query.shape[1]:
        repeats = query.shape[1] // key.shape[1]
        key, value = repeat_kv(key, repeats), repeat_kv(value, repeats)
    last = module is rows.last_only
    out = query.new_zeros(query.shape[0], query.shape[2], query.shape[1], query.shape[3])
    for r, n in enumerate(rows.lengths):
        q = query[r : r + 1, :, -1:] if last else query[r : r + 1, :, -n:]
        o = F.scaled_dot_product_attention(q, key[r : r + 1, :, -n:], value[r : r + 1, :, -n:],
                                           is_causal=not last, scale=scaling)
        out[r, -o.shape[2] :] = o[0].transpose(0, 1)
    return out, None
