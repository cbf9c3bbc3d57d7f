"""The versioned prompts of the live pipeline's roles: one YAML file per prompt in `prompts/`
(`version`, `system`, `user`), with `$name` placeholders (string.Template, so JSON examples need no
escaping). A prompt's id is name@version and its hash the sha256 of its file: both go into every
stage result's cache key and the month's manifest, so a reworded prompt is never mistaken for the
old one."""

from __future__ import annotations

import string
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from fastmmeval.errors import ConfigError
from fastmmeval.live.store import sha256_hex

# Every prompt the pipeline's roles are asked, in the order a page meets them.
PROMPT_NAMES = ("extract_text", "extract_images", "extract_news", "generate", "check", "finalize", "score")


@dataclass(frozen=True)
class Prompt:
    """A role's instructions: system text and a user template."""

    name: str
    version: int
    system: str
    user: str
    sha256: str

    @property
    def id(self) -> str:
        """'name@version'."""
        return f"{self.name}@{self.version}"

    def render(self, **values: Any) -> str:
        """The user message with every `$name` filled in (a missing value is an error)."""
        try:
            return string.Template(self.user).substitute({k: str(v) for k, v in values.items()})
        except KeyError as e:
            raise ConfigError(f"prompt {self.id}: no value for ${e.args[0]}") from None


def prompt(name: str) -> Prompt:
    """The live pipeline's prompt `name` (a file `live/prompts/<name>.yaml`)."""
    return packaged_prompt("fastmmeval.live", name)


@cache
def packaged_prompt(package: str, name: str) -> Prompt:
    """The prompt `name` shipped in `package` (a file `prompts/<name>.yaml` inside it)."""
    path = resources.files(package) / "prompts" / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"no prompt named {name!r} in {package}")
    raw = path.read_bytes()
    data = yaml.safe_load(raw.decode("utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("version"), int) or not isinstance(data.get("user"), str):
        raise ConfigError(f"prompt {path}: expected a mapping with an integer `version` and a `user` template")
    return Prompt(name, data["version"], str(data.get("system") or ""), data["user"], sha256_hex(raw))
