"""One generation request as the engine tracks it, from waiting to finished."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

from fastmmeval.protocol import GenerationSettings

FinishReason = Literal["eos", "stop", "length", "abort"]


class Status(Enum):
    """Where a sequence is: queued, holding a row of the batched cache, or done."""

    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    """A prompt, its decoding settings and what has been generated so far.

    `inputs` is whatever else the model adapter's prefill builder needs besides `prompt_ids`
    (a vision-language prompt's image tensors, say; None for plain text). `output_ids` never
    holds the EOS token; `text` is set when the sequence finishes (cut at the first stop string
    when `finish_reason` is "stop")."""

    seq_id: int
    prompt_ids: list[int]
    settings: GenerationSettings = field(default_factory=GenerationSettings)
    inputs: Any = None
    output_ids: list[int] = field(default_factory=list)
    status: Status = Status.WAITING
    finish_reason: FinishReason | None = None
    text: str | None = None

    def __post_init__(self) -> None:
        if not self.prompt_ids:
            raise ValueError(f"sequence {self.seq_id}: empty prompt")

    @property
    def last_token(self) -> int:
        """The newest token: the one the next decode step feeds."""
        return self.output_ids[-1] if self.output_ids else self.prompt_ids[-1]

    @property
    def is_finished(self) -> bool:
        """Whether decoding of this sequence is over."""
        return self.status is Status.FINISHED

    def finish(self, reason: FinishReason, text: str) -> None:
        """Mark the sequence done with its final text."""
        self.status, self.finish_reason, self.text = Status.FINISHED, reason, text
