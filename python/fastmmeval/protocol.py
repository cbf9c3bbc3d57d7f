"""The plain data shared by tasks, the evaluator and model backends.

Backends see only Requests and answer with Responses; tasks see only Docs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from PIL import Image

Role = Literal["system", "user", "assistant"]
RequestKind = Literal["generate", "loglikelihood"]
# How a multiple-choice task is asked: gen (a generate request, its answer read for the letter) or ppl (a
# loglikelihood request scoring each option's text).
MC_MODES = ("gen", "ppl")


@dataclass(frozen=True)
class TextPart:
    """A piece of text inside a message."""

    text: str


@dataclass(frozen=True)
class ImagePart:
    """A decoded RGB image inside a message; `ref` says where it came from (for logs)."""

    image: Image.Image
    ref: str = ""


Part = TextPart | ImagePart


@dataclass(frozen=True)
class Message:
    """One chat turn: a role and an ordered list of text and image parts."""

    role: Role
    content: tuple[Part, ...]

    @property
    def text(self) -> str:
        """The message's text with `<image>` where each image stands."""
        return "".join(p.text if isinstance(p, TextPart) else "<image>" for p in self.content)

    @property
    def images(self) -> list[Image.Image]:
        """The message's images, in order."""
        return [p.image for p in self.content if isinstance(p, ImagePart)]


@dataclass(frozen=True)
class GenerationSettings:
    """How to decode: greedy when temperature is 0; stop at any of `stop` or EOS."""

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int = 0


@dataclass
class Doc:
    """One benchmark item: its id, its position in the task, and its dataset fields."""

    task: str
    id: str
    index: int
    fields: dict[str, Any]


@dataclass(frozen=True)
class Request:
    """What a backend is asked to do.

    `generate`: continue the chat after `messages` with an assistant turn.
    `loglikelihood`: score each of `continuations` as the start of the assistant turn after
    `messages` (the shared context is the same for all of them).
    `json_schema`: the JSON schema (as JSON text) a generate request's reply must follow: the
    `openai` backend sends it to the server; `models.structured.answer_structured` writes such a
    reply with any backend.
    """

    id: str
    kind: RequestKind
    messages: tuple[Message, ...]
    generation: GenerationSettings = field(default_factory=GenerationSettings)
    continuations: tuple[str, ...] = ()
    json_schema: str | None = None

    @property
    def images(self) -> list[Image.Image]:
        """All images of all messages, in order."""
        return [img for m in self.messages for img in m.images]


@dataclass
class Response:
    """A backend's answer to one Request: `text` for generate, `logprobs` (sum of token
    log-probabilities per continuation) and `is_greedy` for loglikelihood, or `error`."""

    request_id: str
    text: str | None = None
    logprobs: list[float] | None = None
    is_greedy: list[bool] | None = None
    error: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
