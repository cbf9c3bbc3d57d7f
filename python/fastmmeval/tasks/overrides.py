"""Run settings that change a task's protocol as if its file said so: `--gen_kwargs` (the generation
settings) and `--system_instruction` (a system turn before the prompt). Applied to the TaskConfig,
they are part of its fingerprint."""

from __future__ import annotations

import math
from dataclasses import fields, replace
from typing import Any

from fastmmeval.errors import ConfigError
from fastmmeval.protocol import GenerationSettings
from fastmmeval.tasks.config import TaskConfig
from fastmmeval.tasks.messages import MessageTemplate

# The seed of each doc's request comes from the run's --seed, so it is not a generation setting to override.
GEN_KWARGS = tuple(f.name for f in fields(GenerationSettings) if f.name != "seed")
GEN_KWARG_ALIASES = {"until": "stop"}  # lmms-eval's name for stop sequences


def parse_gen_kwargs(text: str) -> dict[str, int | float | str]:
    """`k=v,...` (lmms-eval's --gen_kwargs, e.g. `max_new_tokens=64,temperature=0`) as typed values:
    max_new_tokens an integer >= 1, temperature a number >= 0, top_p one in (0, 1], stop (or until) one
    stop string. An unknown key or a bad value is a ConfigError naming it."""
    out: dict[str, int | float | str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = GEN_KWARG_ALIASES.get(key.strip(), key.strip())
        if not sep or key not in GEN_KWARGS:
            raise ConfigError(f"--gen_kwargs: unknown setting {item!r} (known: {', '.join(GEN_KWARGS)}, as k=v)")
        out[key] = _typed(key, value.strip())
    return out


def check_gen_kwargs(values: dict[str, Any]) -> None:
    """Refuse settings `parse_gen_kwargs` would not give (a caller of the Python API may write them)."""
    for key, value in values.items():
        if key not in GEN_KWARGS:
            raise ConfigError(f"--gen_kwargs: unknown setting {key!r} (known: {', '.join(GEN_KWARGS)})")
        if isinstance(value, bool) or _typed(key, str(value)) != value:
            raise ConfigError(f"--gen_kwargs: bad value for {key}: {value!r}")


def _typed(key: str, value: str) -> int | float | str:
    if key == "stop":
        if not value:
            raise ConfigError("--gen_kwargs: stop needs a non-empty string")
        return value
    try:
        number = int(value) if key == "max_new_tokens" else float(value)
    except ValueError:
        kind = "an integer" if key == "max_new_tokens" else "a number"
        raise ConfigError(f"--gen_kwargs: {key} must be {kind}, got {value!r}") from None
    ok = {"max_new_tokens": number >= 1, "temperature": number >= 0, "top_p": 0 < number <= 1}[key]
    if not ok or not math.isfinite(number):
        bounds = {"max_new_tokens": ">= 1", "temperature": ">= 0", "top_p": "in (0, 1]"}[key]
        raise ConfigError(f"--gen_kwargs: {key} must be {bounds}, got {value!r}")
    return number


def with_generation(config: TaskConfig, gen_kwargs: dict[str, Any]) -> TaskConfig:
    """`config` with `gen_kwargs` (as `parse_gen_kwargs` gives them) over its generation settings; a task
    asked by log-likelihood (ppl mode) generates nothing and is returned as it is."""
    if not gen_kwargs or (config.output_type == "multiple_choice" and config.mc_mode == "ppl"):
        return config
    settings = {k: (tuple([v]) if k == "stop" else v) for k, v in gen_kwargs.items()}
    return replace(config, generation=replace(config.generation, **settings))


def with_system_instruction(config: TaskConfig, text: str) -> TaskConfig:
    """`config` whose prompt starts with a system turn saying `text` (taken literally, braces included);
    a prompt that already starts with a system turn gets `text` in front of it, in that one turn."""
    part = ("text", text.replace("{", "{{").replace("}", "}}"))

    def prepend(turns: tuple[MessageTemplate, ...]) -> tuple[MessageTemplate, ...]:
        if turns and turns[0].role == "system":
            joined = (part[0], part[1] + "\n\n")
            return (replace(turns[0], parts=(joined, *turns[0].parts)), *turns[1:])
        return (MessageTemplate(role="system", parts=(part,)), *turns)

    ppl = config.ppl
    if ppl.doc_to_messages is not None:
        ppl = replace(ppl, doc_to_messages=prepend(ppl.doc_to_messages))
    return replace(config, doc_to_messages=prepend(config.doc_to_messages), ppl=ppl)
