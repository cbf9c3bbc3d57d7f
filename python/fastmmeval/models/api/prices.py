"""What an API backend's tokens cost: USD per 1M input and output tokens."""

from __future__ import annotations

import json
from pathlib import Path

from fastmmeval.errors import ConfigError
from fastmmeval.models.api.args import ApiArgs


def model_prices(args: ApiArgs, where: str) -> tuple[float, float]:
    """USD per 1M (input, output) tokens from `price_table` or `price_in`/`price_out`."""
    if not args.price_table:
        return args.price_in, args.price_out
    path = Path(args.price_table)
    try:
        table = json.loads(path.read_text())
        entry = table[args.model]
        return float(entry["in"]), float(entry["out"])
    except OSError as e:
        raise ConfigError(f"{where}: price_table {path}: cannot read it ({e.strerror})") from None
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ConfigError(
            f"{where}: price_table {path}: needs valid JSON with {{{args.model!r}: {{\"in\": USD, \"out\": USD}}}}"
        ) from None
