"""A scripted backend for server tests and benches: instant answers that say what it was given."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fastmmeval.models.base import Model
from fastmmeval.protocol import Request, Response


@dataclass
class NoArgs:
    """`ImageEcho` takes no `--model_args`."""


class ImageEcho(Model):
    """No engine, no weights: a reply names each image's size and pixel sum, then the last message's
    text; every continuation scores -1. `calls` records how many requests each generate call took.
    Not registered: a bench or test adds it to MODELS to serve it from the CLI."""

    name = "image-echo"
    Args = NoArgs

    def __init__(self, args: Any = None) -> None:
        self.calls: list[int] = []

    def generate(self, requests: list[Request]) -> list[Response]:
        """One echo per request."""
        self.calls.append(len(requests))
        return [Response(r.id, text=" ".join([f"{i.size[0]}x{i.size[1]}:{int(np.asarray(i).sum())}"
                                              for i in r.images] + [r.messages[-1].text]),
                         usage={"prompt_tokens": 1, "completion_tokens": 1}) for r in requests]

    def loglikelihood(self, requests: list[Request]) -> list[Response]:
        """-1 and greedy for every continuation."""
        return [Response(r.id, logprobs=[-1.0] * len(r.continuations), is_greedy=[True] * len(r.continuations))
                for r in requests]

    def fingerprint(self) -> dict[str, Any]:
        """Its name: it has no weights or settings."""
        return {"model": self.name}
