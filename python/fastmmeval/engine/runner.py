"""The torch part of the engine: batched prefill, batched decode and the shared KV cache.

What a prefill feeds the model comes from a prefill builder supplied by the model adapter: plain
token prompts use `token_prefill`; a vision-language model builds its rows with its processor's
tensors and its own position scheme (M-RoPE included). Decode steps then need only each row's next
position, which the builder's `next_positions` fix once per row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import DynamicLayer

from fastmmeval.engine.kv_cache import CacheLayout, Move
from fastmmeval.engine.prefill_attention import rows_attention
from fastmmeval.engine.pruning import last_position_only
from fastmmeval.engine.sequence import Sequence
from fastmmeval.engine.tensors import cache_keyword, cache_of, left_pad


@dataclass
class Batch:
    """Left-padded model inputs for several prompts: what `model(...)` takes for their prefill
    (`input_ids`, `attention_mask` and `position_ids` at least), plus each row's next text
    position after its prompt."""

    inputs: dict[str, torch.Tensor]
    next_positions: torch.Tensor


PrefillBuilder = Callable[[list[Sequence]], Batch]


def window_mask(lengths: list[int], new_tokens: int = 0) -> torch.Tensor:
    """The attention mask of rows holding `lengths` cached tokens that end at one column, over the
    window (the longest row's columns) and then `new_tokens` being fed: 0 for columns before a
    row's tokens, 1 for its cached tokens and the new ones."""
    width = max(lengths, default=0)
    return (torch.arange(width + new_tokens) >= (width - torch.tensor(lengths))[:, None]).long()


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
        last_only = mask is not None and bool(mask[:, -1].all())
        with last_position_only(self.model, enabled=last_only), rows_attention(self.model, mask, last_only):
            out = self.model(**{k: v.to(self.device) for k, v in batch.inputs.items()}, use_cache=True,
                             logits_to_keep=1)
        fresh = cache_of(out)
        unsupported = {type(layer).__name__ for layer in fresh.layers if type(layer) is not DynamicLayer}
        if unsupported:
            raise NotImplementedError(f"the engine supports full-attention caches only, not {sorted(unsupported)}")
        move = self.layout.join([s.seq_id for s in seqs], lengths, batch.next_positions.tolist())
        prefilled = list(fresh.layers)
        if self.cache is None:  # the first prefill's cache object becomes the engine's, with slot layers
            self.cache = fresh
            fresh.layers = [SlotLayer() for _ in prefilled]
        first = len(self.layout) - len(seqs)
        for layer, new in zip(self.cache.layers, prefilled, strict=True):
            if move is not None:
                layer.move(move, like=new.keys)
            layer.write_rows(first, new.keys, new.values, self.layout.end)
        self._refresh()
        return out.logits[:, -1].float()

    @torch.inference_mode()
    def decode(self, seqs: list[Sequence]) -> torch.Tensor:
        """Feed each running sequence's newest token (`seqs`: exactly the cached rows, in any
        order); positions are per row (one value, which an M-RoPE model spreads over its three
        axes). Returns the float32 logits of each one's next token, [len(seqs), vocab], in the
        order of `seqs`."""
        by_id = {s.seq_id: s for s in seqs}
        if len(by_id) != len(seqs) or set(by_id) != set(self.layout.rows):
            raise ValueError("decode must cover exactly the cached rows")
        move = self.layout.reserve()
        if move is not None:
            for layer in self.cache.layers:
                layer.move(move)
            self._refresh()
        rows = [by_id[seq_id] for seq_id in self.layout.rows]
        out = self.model(input_ids=self._tensor([[s.last_token] for s in rows]),
                         attention_mask=window_mask(self.layout.lengths, new_tokens=1).to(self.device),
                         position_ids=self._tensor(self.layout.positions())[:, None],
                         use_cache=True, **{self._cache_kw: self.cache})
        self.layout.advance()
        self._refresh()
        logits = out.logits[:, -1].float()
        row_of = {seq_id: r for r, seq_id in enumerate(self.layout.rows)}
        return logits[self._tensor([row_of[s.seq_id] for s in seqs])]

    @torch.inference_mode()
    def release(self, seq_ids: list[int]) -> None:
        """Free the cache rows of `seq_ids` (the last rows move into their slots)."""
        moves = self.layout.leave(seq_ids)
        if not self.layout.rows:
            self.clear()
            return
        for layer in self.cache.layers:
            for source, destination in moves:
                layer.move_row(source, destination)
        self._refresh()

    def clear(self) -> None:
        """Drop the cache and every row."""
        self.cache = None
        self.layout.clear()

    def _refresh(self) -> None:
        for layer in self.cache.layers:
            layer.show(len(self.layout), self.layout.start, self.layout.end)


class SlotLayer(DynamicLayer):
    """One layer's keys and values in preallocated [slots, heads, columns, head dim] buffers laid
    out by `CacheLayout`: `keys`/`values` are views of the window attention reads, and `update`
    (called by the model's attention in a decode step) writes the new column in place."""

    def __init__(self) -> None:
        super().__init__()
        self.key_buffer: torch.Tensor | None = None
        self.value_buffer: torch.Tensor | None = None
        self._rows = self._start = self._end = 0

    def move(self, move: Move, like: torch.Tensor | None = None) -> None:
        """Reallocate the buffers as `move` says (shaped and typed like `like` when there are none
        yet), copying the rows' tokens across."""
        old = [self.key_buffer, self.value_buffer]
        template = old[0] if old[0] is not None else like
        assert template is not None, "the first move needs a tensor to shape the buffers like"
        shape = (move.slots, template.shape[1], move.columns, template.shape[3])
        new = [template.new_zeros(shape), template.new_zeros(shape)]
        width = move.end - move.start
        if move.rows and width:
            for source, target in zip(old, new, strict=True):
                assert source is not None
                window = source[: move.rows, :, move.start : move.end]
                target[: move.rows, :, move.new_end - width : move.new_end] = window
        self.key_buffer, self.value_buffer = new
        self.is_initialized, self.device = True, template.device

    def write_rows(self, first: int, keys: torch.Tensor, values: torch.Tensor, end: int) -> None:
        """Put a prefill's left-padded [rows, heads, length, dim] block into rows first.. so that
        it ends at column `end`."""
        assert self.key_buffer is not None and self.value_buffer is not None
        rows, length = keys.shape[0], keys.shape[2]
        self.key_buffer[first : first + rows, :, end - length : end] = keys
        self.value_buffer[first : first + rows, :, end - length : end] = values

    def move_row(self, source: int, destination: int) -> None:
        """Move row `source` into slot `destination` and zero slot `source` (free now)."""
        for buffer in (self.key_buffer, self.value_buffer):
            assert buffer is not None
            if source != destination:
                buffer[destination] = buffer[source]
            buffer[source].zero_()

    def show(self, rows: int, start: int, end: int) -> None:
        """Point `keys`/`values` at the window attention reads: rows [0, rows), columns [start, end)."""
        assert self.key_buffer is not None and self.value_buffer is not None
        self._rows, self._start, self._end = rows, start, end
        self.keys = self.key_buffer[:rows, :, start:end]
        self.values = self.value_buffer[:rows, :, start:end]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new tokens' keys and values after the window (in place) and return the window
        grown by them."""
        assert self.key_buffer is not None and self.value_buffer is not None
        new = key_states.shape[2]
        self.key_buffer[: self._rows, :, self._end : self._end + new] = key_states
        self.value_buffer[: self._rows, :, self._end : self._end + new] = value_states
        window = slice(self._start, self._end + new)
        return self.key_buffer[: self._rows, :, window], self.value_buffer[: self._rows, :, window]
