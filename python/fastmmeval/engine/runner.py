"""The torch part of the engine: batched prefill, batched decode and the shared KV cache.

What a prefill feeds the model comes from a prefill builder supplied by the model adapter: plain
token prompts use `token_prefill`; a vision-language model builds its rows with its processor's
tensors and its own position scheme (M-RoPE included). Decode steps then need only each row's next
position, which the builder's `next_positions` fix once per row.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn import functional as F
from transformers.cache_utils import DynamicLayer

from fastmmeval.engine.kv_cache import CacheLayout
from fastmmeval.engine.pruning import last_position_only
from fastmmeval.engine.sequence import Sequence


@dataclass
class Batch:
    """Left-padded model inputs for several prompts: what `model(...)` takes for their prefill
    (`input_ids`, `attention_mask` and `position_ids` at least), plus each row's next text
    position after its prompt."""

    inputs: dict[str, torch.Tensor]
    next_positions: torch.Tensor


PrefillBuilder = Callable[[list[Sequence]], Batch]


def left_pad(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rows left-padded with `pad_id` to the longest: (input ids, attention mask)."""
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad_id] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask


def token_prefill(seqs: list[Sequence], pad_id: int) -> Batch:
    """The prefill of plain token prompts: left-padded ids, positions counting real tokens."""
    ids, mask = left_pad([s.prompt_ids for s in seqs], pad_id)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return Batch({"input_ids": ids, "attention_mask": mask, "position_ids": positions}, mask.sum(-1))


class Runner:
    """Runs a transformers causal LM over the running sequences, one cache row each (see
    `kv_cache`), prefilling new ones with the inputs `build_prefill` makes for them. Needs a model
    whose cache layers are all full-attention `DynamicLayer`s."""

    def __init__(self, model: Any, build_prefill: PrefillBuilder) -> None:
        self.model = model
        self.build_prefill = build_prefill
        self.layout = CacheLayout()
        self.cache: Any = None
        self._cache_kw = cache_keyword(model)

    @property
    def device(self) -> torch.device:
        """Where the model's inputs go."""
        return self.model.device

    def _tensor(self, data: list[Any]) -> torch.Tensor:
        return torch.tensor(data, device=self.device)

    @torch.inference_mode()
    def prefill(self, seqs: list[Sequence]) -> torch.Tensor:
        """Prefill `seqs` together (left-padded, by `build_prefill`) and add their rows to the
        cache. Returns the float32 logits of each one's next token, [len(seqs), vocab]. The only
        place `pruning.last_position_only` is switched on."""
        batch = self.build_prefill(seqs)
        lengths = [len(s.prompt_ids) for s in seqs]
        if batch.inputs["input_ids"].shape != (len(seqs), max(lengths)):
            raise ValueError(f"the prefill builder gave input_ids of shape {tuple(batch.inputs['input_ids'].shape)} "
                             f"for {len(seqs)} prompts of at most {max(lengths)} tokens")
        # Only the last position's logits are kept, and with every row ending in the last column (left
        # padding) a model whose final layer was hooked at load (`pruning`) runs its MLP there only.
        mask = batch.inputs.get("attention_mask")
        with last_position_only(self.model, enabled=mask is not None and bool(mask[:, -1].all())):
            out = self.model(**{k: v.to(self.device) for k, v in batch.inputs.items()}, use_cache=True,
                             logits_to_keep=1)
        cache = cache_of(out)
        unsupported = {type(layer).__name__ for layer in cache.layers if type(layer) is not DynamicLayer}
        if unsupported:
            raise NotImplementedError(f"the engine supports full-attention caches only, not {sorted(unsupported)}")
        pad_old, pad_new = self.layout.join([s.seq_id for s in seqs], lengths, batch.next_positions.tolist())
        if self.cache is None:
            self.cache = cache
        else:
            for old, new in zip(self.cache.layers, cache.layers, strict=True):
                old.keys = torch.cat([_left_pad(old.keys, pad_old), _left_pad(new.keys, pad_new)])
                old.values = torch.cat([_left_pad(old.values, pad_old), _left_pad(new.values, pad_new)])
        return out.logits[:, -1].float()

    @torch.inference_mode()
    def decode(self, seqs: list[Sequence]) -> torch.Tensor:
        """Feed each running sequence's newest token. `seqs` must be the cache's rows, in order.
        Positions are per row (one value, which an M-RoPE model spreads over its three axes).
        Returns the float32 logits of each one's next token, [len(seqs), vocab]."""
        if [s.seq_id for s in seqs] != self.layout.rows:
            raise ValueError("decode must cover exactly the cached rows, in row order")
        out = self.model(input_ids=self._tensor([[s.last_token] for s in seqs]),
                         attention_mask=self._tensor(self.layout.attention_mask(new_tokens=1)),
                         position_ids=self._tensor(self.layout.positions())[:, None],
                         use_cache=True, **{self._cache_kw: self.cache})
        self.cache = cache_of(out)
        self.layout.advance()
        return out.logits[:, -1].float()

    def release(self, seq_ids: list[int]) -> None:
        """Free the cache rows of `seq_ids` and trim columns that became padding everywhere."""
        keep, trim = self.layout.leave(seq_ids)
        if not keep:
            self.cache = None
            return
        index = self._tensor(keep)
        for layer in self.cache.layers:
            layer.keys = layer.keys[index, :, trim:]
            layer.values = layer.values[index, :, trim:]

    def clear(self) -> None:
        """Drop the cache and every row."""
        self.cache = None
        self.layout.clear()


def _left_pad(states: torch.Tensor, columns: int) -> torch.Tensor:
    """[batch, heads, length, dim] -> the same with `columns` zero columns before `length`."""
    return F.pad(states, (0, 0, columns, 0)) if columns else states


def cache_keyword(model: Any) -> str:
    """The name under which `model.forward` takes a KV cache: transformers 5 renamed
    `past_key_values` to `cache`; accept either."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def cache_of(output: Any) -> Any:
    """The KV cache of a model output (under either name)."""
    return output["cache"] if "cache" in output else output["past_key_values"]
