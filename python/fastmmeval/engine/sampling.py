"""Choosing the next token and cutting text at stop strings."""

from __future__ import annotations

import torch

from fastmmeval.protocol import GenerationSettings


def choose_token(logits: torch.Tensor, settings: GenerationSettings, generator: torch.Generator | None) -> int:
    """The next token: argmax when greedy, else a nucleus sample at the given temperature."""
    if generator is None:
        return int(logits.argmax())
    # Sampling uses the request's own CPU generator wherever the model runs.
    probs = (logits.cpu() / settings.temperature).softmax(-1)
    if settings.top_p < 1.0:
        sorted_probs, order = probs.sort(descending=True)
        outside = sorted_probs.cumsum(-1) - sorted_probs >= settings.top_p
        outside[0] = False  # the most likely token always stays
        sorted_probs[outside] = 0.0
        probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
    return int(torch.multinomial(probs, 1, generator=generator))


def cut_at_stop(text: str, stops: tuple[str, ...]) -> str | None:
    """`text` up to its earliest stop string, or None when none occurs."""
    hits = [text.find(s) for s in stops if s and s in text]
    return text[: min(hits)] if hits else None
