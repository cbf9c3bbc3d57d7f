"""Bookkeeping of the batched KV cache (torch-free).

The runner keeps one transformers `DynamicCache` for all running sequences: row r of every
layer's keys/values belongs to `rows[r]`, whose `lengths[r]` cached tokens sit right-aligned in
the cache's `width` columns (left padding, masked out). Sequences leave by row selection, after
which columns that are padding in every remaining row are trimmed on the left; newly prefilled
sequences join by left-padding the old and new caches to a common width and concatenating along
the batch. Each row also keeps the offset of its position ids from its cached token count (0 for
plain text; M-RoPE models such as Qwen2-VL shift text after images by a per-row `rope_delta`).
This module only says which rows, how many columns and which positions; `runner` moves the tensors.
"""

from __future__ import annotations


class CacheLayout:
    """Which cache row each running sequence owns, how many of the columns are its tokens and how
    far its positions are shifted from that count."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.lengths: list[int] = []
        self.offsets: list[int] = []
        self.width = 0

    def __len__(self) -> int:
        return len(self.rows)

    def join(self, seq_ids: list[int], lengths: list[int], next_positions: list[int] | None = None) -> tuple[int, int]:
        """Append rows for `seq_ids`, whose new cache holds `lengths` tokens each, left-padded to
        max(lengths), and whose next tokens sit at `next_positions` (default: `lengths`).
        Returns the left padding to add to (the old cache, the new cache) so both reach the
        common width."""
        next_positions = lengths if next_positions is None else next_positions
        if not seq_ids or not len(seq_ids) == len(lengths) == len(next_positions):
            raise ValueError(f"join needs one length and next position per sequence, got {len(seq_ids)} ids, "
                             f"{len(lengths)} lengths, {len(next_positions)} next positions")
        if clash := set(seq_ids) & set(self.rows):
            raise ValueError(f"sequences {sorted(clash)} already own a row")
        new_width = max(lengths)
        width = max(self.width, new_width)
        pads = (width - self.width, width - new_width)
        self.rows += seq_ids
        self.lengths += lengths
        self.offsets += [p - n for p, n in zip(next_positions, lengths, strict=True)]
        self.width = width
        return pads

    def leave(self, seq_ids: list[int]) -> tuple[list[int], int]:
        """Drop the rows of `seq_ids`. Returns the old row indices to keep (in order) and how many
        leading columns to trim, now padding in every kept row."""
        gone = set(seq_ids)
        if missing := gone - set(self.rows):
            raise ValueError(f"sequences {sorted(missing)} own no row")
        keep = [r for r, seq_id in enumerate(self.rows) if seq_id not in gone]
        self.rows = [self.rows[r] for r in keep]
        self.lengths = [self.lengths[r] for r in keep]
        self.offsets = [self.offsets[r] for r in keep]
        width = max(self.lengths, default=0)
        trim, self.width = self.width - width, width
        return keep, trim

    def advance(self) -> None:
        """Every row cached one more token (after a decode step)."""
        self.lengths = [n + 1 for n in self.lengths]
        self.width += 1

    def attention_mask(self, new_tokens: int = 0) -> list[list[int]]:
        """Per row: 0 for padding columns, 1 for cached tokens, then 1 for `new_tokens` being fed."""
        return [[0] * (self.width - n) + [1] * (n + new_tokens) for n in self.lengths]

    def positions(self) -> list[int]:
        """Per row: the position of the next token fed (its cached token count plus its offset)."""
        return [n + offset for n, offset in zip(self.lengths, self.offsets, strict=True)]

    def clear(self) -> None:
        """Forget every row."""
        self.rows, self.lengths, self.offsets, self.width = [], [], [], 0
