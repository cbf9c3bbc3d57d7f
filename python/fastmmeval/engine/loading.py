"""What a model adapter does to a freshly loaded model before the engine runs it."""

from __future__ import annotations

import logging
from typing import Any

from fastmmeval.engine import prefill_attention
from fastmmeval.engine.pruning import decoder_layers, prune_for_inference

logger = logging.getLogger(__name__)


def ready_for_engine(model: Any, probe: list[int], pad_id: int, prune: bool) -> None:
    """Apply the load-time savings to `model`, each only where its check on a probe prefill of
    `probe` (plain text token ids) and a shorter prefix of it passes: with `prune`, skip work whose
    result is never read (`pruning`); always, run generation prefills' attention row by row
    (`prefill_attention`), the final layer's from the last position only when `prune`."""
    prompts = [probe, probe[: len(probe) // 2]]
    if prune:
        prune_for_inference(model, prompts, pad_id)
    layers = decoder_layers(model)
    final = getattr(layers[-1], "self_attn", None) if prune and layers is not None else None
    rows = prefill_attention.install(model, prompts, pad_id, final_attention=final)
    logger.info("prefill attention %s", "row by row" if rows else "as the model's own")
