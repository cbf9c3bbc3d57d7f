"""Bookkeeping of the batched KV cache (torch-free).

The runner keeps every layer's keys and values in preallocated buffers of `slots` rows x `columns`
columns. Row r belongs to `rows[r]`, whose `lengths[r]` cached tokens end at column `end`, like
every other row's (right-aligned; what lies left of a row's tokens is masked out). So a decode step
writes each row's new token in place at column `end`, and attention reads the window
[end - width, end), width being the longest row. Sequences join by writing their prefilled block
into free rows, ending at `end`; a sequence leaves by moving the last row into its slot, so no step
copies the whole cache. Only when the buffers are full (no free row, no column right of `end`, or
a prompt longer than `end`) do all rows move into larger buffers (a `Move`), with room to spare so
that this stays rare.

Each row also keeps the offset of its position ids from its cached token count (0 for plain text;
M-RoPE models such as Qwen2-VL shift text after images by a per-row `rope_delta`). This module only
says which rows, which columns and which positions; `runner` moves the tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

# Spare columns a move leaves left of the rows' tokens (a longer prompt can join without moving)
# and right of them (decode steps before the next move).
SPARE_LEFT = 64
SPARE_RIGHT = 256
SLOT_MULTIPLE = 8  # rows are allocated in multiples of this


@dataclass(frozen=True)
class Move:
    """Copy columns [start, end) of the first `rows` rows into new zeroed buffers of `slots` rows x
    `columns` columns, where they end at column `new_end` instead."""

    rows: int
    start: int
    end: int
    slots: int
    columns: int
    new_end: int


class CacheLayout:
    """Which cache row each running sequence owns, how many of the columns before `end` are its
    tokens, and how far its positions are shifted from that count."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.lengths: list[int] = []
        self.offsets: list[int] = []
        self.end = 0  # the column after every row's last cached token
        self.slots = 0  # rows allocated
        self.columns = 0  # columns allocated

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def width(self) -> int:
        """Columns attention reads: the longest row's token count."""
        return max(self.lengths, default=0)

    @property
    def start(self) -> int:
        """The first column attention reads."""
        return self.end - self.width

    def join(self, seq_ids: list[int], lengths: list[int], next_positions: list[int] | None = None) -> Move | None:
        """Add rows for `seq_ids`, whose prefilled cache holds `lengths` tokens each, left-padded to
        max(lengths), and whose next tokens sit at `next_positions` (default: `lengths`). The new
        rows are the last ones; their block ends at column `end`. Returns the move the buffers need
        first, if any."""
        next_positions = lengths if next_positions is None else next_positions
        if not seq_ids or not len(seq_ids) == len(lengths) == len(next_positions):
            raise ValueError(f"join needs one length and next position per sequence, got {len(seq_ids)} ids, "
                             f"{len(lengths)} lengths, {len(next_positions)} next positions")
        if clash := set(seq_ids) & set(self.rows):
            raise ValueError(f"sequences {sorted(clash)} already own a row")
        move = self._fit(len(self.rows) + len(seq_ids), max(self.width, *lengths))
        self.rows += seq_ids
        self.lengths += lengths
        self.offsets += [p - n for p, n in zip(next_positions, lengths, strict=True)]
        return move

    def reserve(self) -> Move | None:
        """Make room for one more column (before a decode step); returns the move needed, if any."""
        return self._fit(len(self.rows), self.width)

    def _fit(self, rows: int, width: int) -> Move | None:
        """The move (if any) after which `rows` rows fit, `width` columns fit before `end`, and one
        column is free after it."""
        if rows <= self.slots and width <= self.end < self.columns:
            return None
        slots = max(self.slots, -(-rows // SLOT_MULTIPLE) * SLOT_MULTIPLE)
        new_end = width + SPARE_LEFT
        move = Move(len(self.rows), self.start, self.end, slots, new_end + SPARE_RIGHT, new_end)
        self.slots, self.columns, self.end = move.slots, move.columns, move.new_end
        return move

    def leave(self, seq_ids: list[int]) -> list[tuple[int, int]]:
        """Drop the rows of `seq_ids`: each one's slot is taken by the last row. Returns the
        (source, destination) row moves to make in order; afterwards the source slot is free (a
        row that was last moves onto itself)."""
        if missing := set(seq_ids) - set(self.rows):
            raise ValueError(f"sequences {sorted(missing)} own no row")
        moves = []
        for seq_id in seq_ids:
            row, last = self.rows.index(seq_id), len(self.rows) - 1
            for column in (self.rows, self.lengths, self.offsets):
                column[row] = column[last]
                column.pop()
            moves.append((last, row))
        return moves

    def advance(self) -> None:
        """Every row cached one more token, at column `end` (after a decode step)."""
        self.lengths = [n + 1 for n in self.lengths]
        self.end += 1

    def positions(self) -> list[int]:
        """Per row: the position of the next token fed (its cached token count plus its offset)."""
        return [n + offset for n, offset in zip(self.lengths, self.offsets, strict=True)]

    def clear(self) -> None:
        """Forget every row and the buffers' shape."""
        self.rows, self.lengths, self.offsets = [], [], []
        self.end = self.slots = self.columns = 0
