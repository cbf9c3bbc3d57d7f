"""The `--model_args` every API backend takes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ApiArgs:
    """`--model_args` every API backend takes.

    model: the model name the API knows (required).
    api_key_env: the NAME of the environment variable holding the key (the key itself is never
        passed on the command line, logged, cached or written anywhere).
    system: a system instruction put before each request's own (if any).
    temperature: overrides the task's temperature (the task's is 0, greedy, unless it says otherwise).
    max_tokens: overrides the task's `max_new_tokens` (0: the task's).
    max_image_side: images are shrunk (aspect kept) so their longer side is at most this (0: as is).
    max_concurrency: the most requests in flight; the limit adapts below it on 429s.
    timeout: seconds one attempt may take before it is abandoned and retried.
    max_retries: retries after the first attempt before the request is recorded as failed.
    backoff: base seconds of the exponential backoff (attempt k waits up to backoff * 2**k, jittered).
    cache_dir: where the sqlite response cache lives ("": $FASTMMEVAL_CACHE/api or
        ~/.cache/fastmmeval/api; "off": no cache).
    price_in, price_out: USD per 1M input / output tokens, for the cost in results.json.
    price_table: a JSON file {"<model>": {"in": USD per 1M, "out": USD per 1M}} (instead of the two above).
    """

    model: str
    api_key_env: str = ""
    system: str = ""
    temperature: float | None = None
    max_tokens: int = 0
    max_image_side: int = 1024
    max_concurrency: int = 32
    timeout: float = 60.0
    max_retries: int = 5
    backoff: float = 0.5
    cache_dir: str = ""
    price_in: float = 0.0
    price_out: float = 0.0
    price_table: str = ""
