"""Log-likelihood of continuations after a shared prefix that runs once."""

from __future__ import annotations

import copy
from typing import Any

import torch

from fastmmeval.engine.tensors import cache_keyword, cache_of


@torch.inference_mode()
def score_continuations(
    model: Any,
    prefix_inputs: dict[str, torch.Tensor],
    prefix_len: int,
    start_position: int,
    continuations: list[list[int]],
    pad_id: int,
    batch_size: int,
) -> tuple[list[float], list[bool]]:
    """For each continuation (token ids) following the prefix (one row of model inputs, text or
    multimodal, `prefix_len` tokens, next position `start_position`): the sum of its tokens'
    log-probabilities (float32), and whether greedy decoding would produce exactly those tokens.
    The prefix runs once; its cache is copied for each batch of continuations. An empty
    continuation scores (0.0, True)."""
    logprobs, greedy = [0.0] * len(continuations), [True] * len(continuations)
    scored = [i for i, c in enumerate(continuations) if c]
    if not scored:
        return logprobs, greedy
    device = model.device
    out = model(**{k: v.to(device) for k, v in prefix_inputs.items()}, use_cache=True, logits_to_keep=1)
    first = out.logits[0, -1].float().log_softmax(-1)
    cache_kw = cache_keyword(model)
    for start in range(0, len(scored), batch_size):
        chunk = scored[start : start + batch_size]
        cache = copy.deepcopy(cache_of(out))
        cache.batch_repeat_interleave(len(chunk))
        width = max(len(continuations[i]) for i in chunk)
        padded = [continuations[i] + [pad_id] * (width - len(continuations[i])) for i in chunk]
        ids = torch.tensor(padded, device=device)
        mask = torch.tensor(
            [[1] * (prefix_len + len(continuations[i])) + [0] * (width - len(continuations[i])) for i in chunk],
            device=device,
        )
        positions = (start_position + torch.arange(width, device=device)).expand(len(chunk), -1)
        rest = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **{cache_kw: cache})
        rest_logprobs = rest.logits.float().log_softmax(-1)
        for j, i in enumerate(chunk):
            tokens = torch.tensor(continuations[i], device=device)
            # Row 0 predicts the continuation's first token; row m its token m + 1.
            dist = torch.cat([first[None], rest_logprobs[j, : len(tokens) - 1]])
            logprobs[i] = float(dist.gather(1, tokens[:, None]).sum())
            greedy[i] = bool((dist.argmax(-1) == tokens).all())
    return logprobs, greedy
