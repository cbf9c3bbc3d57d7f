"""The engine's torch-free bookkeeping: scheduler admission and ordering, cache row layout."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fastmmeval.engine import CacheLayout, Scheduler, Sequence, Status
from fastmmeval.engine.kv_cache import SLOT_MULTIPLE, SPARE_LEFT, SPARE_RIGHT, Move
from fastmmeval.engine.runner import window_mask
from fastmmeval.protocol import GenerationSettings


def seq(seq_id: int, prompt_len: int) -> Sequence:
    return Sequence(seq_id, list(range(1, prompt_len + 1)), GenerationSettings(max_new_tokens=8))


def ids(seqs: list[Sequence]) -> list[int]:
    return [s.seq_id for s in seqs]


def finish(*seqs: Sequence) -> list[Sequence]:
    for s in seqs:
        s.finish("length", "")
    return list(seqs)


def test_bookkeeping_modules_do_not_import_torch() -> None:
    code = ("import sys; import fastmmeval.engine; from fastmmeval.engine import sequence, scheduler, kv_cache; "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_waiting_sequences_are_admitted_longest_first_ties_in_arrival_order() -> None:
    scheduler = Scheduler(max_batch_size=8, max_batch_tokens=10_000)
    for i, n in enumerate([3, 9, 5, 9, 1]):
        scheduler.add(seq(i, n))
    step = scheduler.schedule()
    assert ids(step.prefill) == [1, 3, 2, 0, 4]
    assert step.decode == []
    assert all(s.status is Status.RUNNING for s in step.prefill)
    assert not scheduler.waiting


def test_admission_stops_at_max_batch_size() -> None:
    scheduler = Scheduler(max_batch_size=3, max_batch_tokens=10_000)
    for i in range(5):
        scheduler.add(seq(i, 4))
    assert ids(scheduler.schedule().prefill) == [0, 1, 2]
    step = scheduler.schedule()
    assert (ids(step.decode), step.prefill) == ([0, 1, 2], [])
    assert ids(scheduler.waiting) == [3, 4]


def test_admission_counts_padded_prefill_and_decode_tokens_against_the_budget() -> None:
    scheduler = Scheduler(max_batch_size=16, max_batch_tokens=20)
    for i, n in enumerate([6, 4, 4, 4, 2]):
        scheduler.add(seq(i, n))
    step = scheduler.schedule()
    # Padded to the longest admitted prompt: 3 x 6 = 18 <= 20, a fourth would make 24.
    assert ids(step.prefill) == [0, 1, 2]
    assert step.num_tokens == 18
    # Next step: 3 decode tokens + 2 x 4 padded prefill tokens = 11; 3 + 3 x 4 = 15; 3 + 4 x 4 > 20.
    step = scheduler.schedule()
    assert (ids(step.decode), ids(step.prefill)) == ([0, 1, 2], [3, 4])
    assert step.num_tokens == 3 + 2 * 4


def test_a_prompt_over_the_budget_runs_alone_rather_than_never() -> None:
    scheduler = Scheduler(max_batch_size=4, max_batch_tokens=10)
    scheduler.add(seq(0, 50))
    scheduler.add(seq(1, 2))
    assert ids(scheduler.schedule().prefill) == [0]
    # While it runs the budget holds: 1 decode token + 2 prefill tokens fit.
    assert ids(scheduler.schedule().prefill) == [1]


def test_the_head_of_the_queue_is_not_skipped() -> None:
    scheduler = Scheduler(max_batch_size=4, max_batch_tokens=6)
    scheduler.add(seq(0, 3))
    scheduler.schedule()
    scheduler.add(seq(1, 8))
    scheduler.add(seq(2, 1))
    # 1 decode token + 8 > 6: the long head waits for an empty step, and the short one behind it too.
    assert scheduler.schedule().prefill == []
    scheduler.free(finish(scheduler.running[0]))
    assert ids(scheduler.schedule().prefill) == [1]


def test_finished_sequences_leave_and_waiting_ones_join_at_the_next_step() -> None:
    scheduler = Scheduler(max_batch_size=2, max_batch_tokens=1000)
    seqs = [seq(i, 10 - i) for i in range(5)]
    for s in seqs:
        scheduler.add(s)
    assert ids(scheduler.schedule().prefill) == [0, 1]
    scheduler.free(finish(seqs[1]))
    step = scheduler.schedule()
    assert (ids(step.decode), ids(step.prefill)) == ([0], [2])
    scheduler.free(finish(seqs[0], seqs[2]))
    step = scheduler.schedule()
    assert (ids(step.decode), ids(step.prefill)) == ([], [3, 4])
    scheduler.free(finish(seqs[3], seqs[4]))
    assert not scheduler.has_unfinished()
    assert scheduler.schedule().is_empty


def test_only_finished_sequences_can_be_freed_and_only_waiting_ones_added() -> None:
    scheduler = Scheduler(max_batch_size=2, max_batch_tokens=100)
    s = seq(0, 3)
    scheduler.add(s)
    scheduler.schedule()
    with pytest.raises(ValueError, match="not finished"):
        scheduler.free([s])
    with pytest.raises(ValueError, match="not waiting"):
        scheduler.add(s)
    assert scheduler.clear() == [s]
    assert not scheduler.has_unfinished()


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="max_batch_size"):
        Scheduler(0, 10)
    with pytest.raises(ValueError, match="max_batch_tokens"):
        Scheduler(1, 0)
    with pytest.raises(ValueError, match="empty prompt"):
        Sequence(0, [])


def test_layout_rows_end_at_a_common_column_and_newcomers_fit_in_before_it() -> None:
    layout = CacheLayout()
    first = layout.join([7, 8], [3, 5])  # nothing allocated yet: buffers with room on both sides
    assert first == Move(rows=0, start=0, end=0, slots=SLOT_MULTIPLE, columns=5 + SPARE_LEFT + SPARE_RIGHT,
                         new_end=5 + SPARE_LEFT)
    assert (layout.end, layout.start) == (5 + SPARE_LEFT, SPARE_LEFT)
    assert window_mask(layout.lengths).tolist() == [[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]
    assert layout.positions() == [3, 5]
    assert layout.reserve() is None
    layout.advance()  # a decode step wrote column `end` in place
    assert window_mask(layout.lengths, new_tokens=1).tolist() == [[0, 0, 1, 1, 1, 1, 1], [1] * 7]
    # A longer newcomer widens the window to the left, a shorter one is masked on its left: no copy.
    assert layout.join([9], [8]) is None
    assert layout.join([10], [2]) is None
    assert (layout.rows, layout.lengths, layout.width) == ([7, 8, 9, 10], [4, 6, 8, 2], 8)
    assert window_mask(layout.lengths).tolist() == [[0] * 4 + [1] * 4, [0] * 2 + [1] * 6, [1] * 8, [0] * 6 + [1] * 2]


def test_layout_leave_moves_the_last_row_into_the_freed_slot() -> None:
    layout = CacheLayout()
    layout.join([1, 2, 3, 4], [4, 9, 6, 2])
    assert layout.leave([2]) == [(3, 1)]
    assert (layout.rows, layout.lengths, layout.width) == ([1, 4, 3], [4, 2, 6], 6)
    assert layout.leave([3, 1]) == [(2, 2), (1, 0)]  # a last row frees its own slot
    assert (layout.rows, layout.lengths) == ([4], [2])
    assert layout.leave([4]) == [(0, 0)]
    assert (len(layout), layout.width) == (0, 0)


def test_layout_moves_rows_only_when_a_row_a_column_or_a_long_prompt_does_not_fit() -> None:
    layout = CacheLayout()
    layout.join(list(range(SLOT_MULTIPLE)), [5] * SLOT_MULTIPLE)
    end = layout.end
    assert layout.join([100], [3]) == Move(rows=SLOT_MULTIPLE, start=end - 5, end=end, slots=2 * SLOT_MULTIPLE,
                                           columns=end + SPARE_RIGHT, new_end=end)
    assert layout.join([101], [end + 10]) == Move(rows=SLOT_MULTIPLE + 1, start=end - 5, end=end,
                                                  slots=2 * SLOT_MULTIPLE, columns=end + 10 + SPARE_LEFT + SPARE_RIGHT,
                                                  new_end=end + 10 + SPARE_LEFT)
    steps = 0
    while layout.reserve() is None:
        layout.advance()
        steps += 1
    assert steps == SPARE_RIGHT  # decode steps before the columns run out; then all rows move left
    assert (layout.end, layout.start) == (layout.width + SPARE_LEFT, SPARE_LEFT)


def test_layout_refuses_unknown_and_duplicate_rows() -> None:
    layout = CacheLayout()
    layout.join([1], [2])
    with pytest.raises(ValueError, match="already own"):
        layout.join([1], [2])
    with pytest.raises(ValueError, match="own no row"):
        layout.leave([5])


def test_layout_positions_keep_each_rows_offset_through_joins_and_leaves() -> None:
    """M-RoPE rows (next position = cached tokens + rope delta) keep their shift as they decode."""
    layout = CacheLayout()
    layout.join([1, 2], [5, 3], next_positions=[2, 3])
    layout.join([3], [4])
    assert layout.positions() == [2, 3, 4]
    layout.advance()
    assert layout.positions() == [3, 4, 5]
    layout.leave([2])
    assert (layout.rows, layout.positions()) == ([1, 3], [3, 5])
    with pytest.raises(ValueError, match="next position"):
        layout.join([4], [2], next_positions=[1, 2])
