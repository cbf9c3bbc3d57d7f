"""Which sequences decode and which join at each step (torch-free)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fastmmeval.engine.sequence import Sequence, Status


@dataclass
class ScheduledStep:
    """One step's work: `decode` (all running sequences, in cache-row order) advance one token,
    then `prefill` (newly admitted, longest first) are prefilled together and join them."""

    prefill: list[Sequence] = field(default_factory=list)
    decode: list[Sequence] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        """Whether there is nothing to run."""
        return not self.prefill and not self.decode

    @property
    def num_tokens(self) -> int:
        """Tokens this step feeds the model, counting prefill padding (left-padded to the longest
        admitted prompt)."""
        width = max((len(s.prompt_ids) for s in self.prefill), default=0)
        return len(self.decode) + width * len(self.prefill)


class Scheduler:
    """A waiting queue and a running set.

    Admission: at most `max_batch_size` sequences run at once, and a step feeds at most
    `max_batch_tokens` tokens (one per decoding sequence plus the padded prefill). Waiting
    sequences are admitted longest prompt first (ties: first added first), which keeps each
    prefill's padding small; the queue's head is never skipped. A step that would otherwise be
    empty admits the head even when its prompt alone exceeds the budget."""

    def __init__(self, max_batch_size: int, max_batch_tokens: int) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
        if max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be at least 1, got {max_batch_tokens}")
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []

    def add(self, seq: Sequence) -> None:
        """Queue a new sequence."""
        if seq.status is not Status.WAITING:
            raise ValueError(f"sequence {seq.seq_id} is {seq.status.value}, not waiting")
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        """Whether any sequence is waiting or running."""
        return bool(self.waiting or self.running)

    def schedule(self) -> ScheduledStep:
        """This step's work; admitted sequences move from waiting to running."""
        step = ScheduledStep(decode=list(self.running))
        self.waiting.sort(key=lambda s: -len(s.prompt_ids))  # stable: ties keep their arrival order
        while self.waiting and len(self.running) + len(step.prefill) < self.max_batch_size:
            width = len((step.prefill or self.waiting)[0].prompt_ids)  # the first admitted is the longest
            cost = len(step.decode) + width * (len(step.prefill) + 1)
            if cost > self.max_batch_tokens and not step.is_empty:
                break
            step.prefill.append(self.waiting.pop(0))
        for seq in step.prefill:
            seq.status = Status.RUNNING
        self.running.extend(step.prefill)
        return step

    def free(self, finished: list[Sequence]) -> None:
        """Remove finished (or aborted) sequences from the running and waiting sets."""
        for seq in finished:
            if not seq.is_finished:
                raise ValueError(f"sequence {seq.seq_id} is {seq.status.value}, not finished")
        gone = {id(s) for s in finished}
        self.running = [s for s in self.running if id(s) not in gone]
        self.waiting = [s for s in self.waiting if id(s) not in gone]

    def clear(self) -> list[Sequence]:
        """Drop every waiting and running sequence (after a failed step); returns them."""
        dropped, self.waiting, self.running = self.waiting + self.running, [], []
        return dropped
