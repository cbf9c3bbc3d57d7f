"""The pipeline's roles (extractor, generator, checker, finalizer, scorer): each a registered model
backend with its arguments and decoding settings. A role's answers are cached in the stage cache under
(stage, prompt id and hash, the role's fingerprint, the input hashes), so a rerun asks nothing twice;
failures are returned, never cached, never turned into text."""

from __future__ import annotations

import io
import json
import threading
from collections import Counter
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from PIL import Image

from fastmmeval.live.prompts import Prompt
from fastmmeval.live.store import StageCache, content_key
from fastmmeval.models.api.client import ApiModel
from fastmmeval.models.base import MODELS, Model, failure_reason, parse_args
from fastmmeval.models.structured import answer_structured
from fastmmeval.protocol import GenerationSettings, ImagePart, Message, Request, TextPart

ROLE_NAMES = ("extractor", "generator", "checker", "finalizer", "scorer")


@dataclass(frozen=True)
class RoleSpec:
    """Which backend plays a role, with what `--model_args` and how it decodes."""

    role: str
    model: str
    args: dict[str, str] = field(default_factory=dict)
    max_new_tokens: int = 4096
    temperature: float = 0.0

    def settings(self) -> GenerationSettings:
        """The role's decoding settings."""
        return GenerationSettings(max_new_tokens=self.max_new_tokens, temperature=self.temperature, seed=0)


@dataclass
class Reply:
    """A role's answer to one call: its text, or why there is none; `cached` when no call was made."""

    text: str | None
    error: str | None = None
    cached: bool = False
    usage: dict[str, int] = field(default_factory=dict)


class Role:
    """One role of the pipeline, asked from any number of threads. API backends take the calls
    concurrently (their adaptive limit holds across threads); a local backend takes one at a time,
    under `lock` (shared by the roles it plays)."""

    def __init__(self, spec: RoleSpec, model: Model, lock: AbstractContextManager[Any] | None = None) -> None:
        self.spec = spec
        self.model = model
        self.counts: Counter[str] = Counter()
        self.by_stage: dict[str, Counter[str]] = {}  # the same counts, per stage (prompt) asked
        self._counts_lock = threading.Lock()
        self._api = isinstance(model, ApiModel)
        self._serial = nullcontext() if self._api else lock or threading.Lock()

    @property
    def name(self) -> str:
        """The model's name as recorded in the dataset (e.g. `data_generator`): backend and its model."""
        named = self.spec.args.get("model") or self.spec.args.get("pretrained")
        return f"{self.spec.model}:{named}" if named else self.spec.model

    def fingerprint(self) -> dict[str, Any]:
        """What identifies this role's answers: the backend's fingerprint and the decoding settings."""
        return {"model": self.spec.model, "backend": self.model.fingerprint(), "settings": vars(self.spec.settings())}

    def ask(self, stage: str, prompt: Prompt, values: dict[str, Any], images: Sequence[bytes],
            cache: StageCache, inputs: Sequence[str], schema: dict[str, Any] | None = None) -> Reply:
        """The role's reply to `prompt` rendered with `values`, shown the PNG/JPEG `images` first;
        `inputs` are the hashes of what the prompt was built from (they key the cache with the rest).
        With `schema`, the reply is asked for in that JSON schema: API backends pass it on (OpenAI's
        `response_format`), a local backend is made to answer in it (models.structured)."""
        schema_text = json.dumps(schema, sort_keys=True) if schema is not None else None
        key = content_key("role", stage, prompt.id, prompt.sha256, self.fingerprint(), list(inputs), schema_text)
        hit = cache.get(key)
        if hit is None:
            with cache.claim(key):  # the same call asked twice at once is made once: the second reads the first's
                hit = cache.get(key)
                if hit is None:
                    return self._call(stage, prompt, values, images, cache, key, schema_text)
        self._count(stage, cached=1)
        return Reply(hit["text"], cached=True, usage=hit.get("usage", {}))

    def _call(self, stage: str, prompt: Prompt, values: dict[str, Any], images: Sequence[bytes], cache: StageCache,
              key: str, schema_text: str | None) -> Reply:
        parts = [ImagePart(_decode(data), ref=f"{stage}:{i}") for i, data in enumerate(images)]
        parts.append(TextPart(prompt.render(**values)))
        system = [Message("system", (TextPart(prompt.system),))] if prompt.system else []
        messages = (*system, Message("user", tuple(parts)))
        request = Request(f"live:{stage}:{key[:16]}", "generate", messages, self.spec.settings(),
                          json_schema=schema_text)
        try:
            with self._serial:
                structured = schema_text is not None and not self._api
                response = answer_structured(self.model, request) if structured else self.model.generate([request])[0]
        except Exception as e:  # one failed call fails its page or item, not the build
            self._count(stage, calls=1, failed=1)
            return Reply(None, error=failure_reason(f"{self.spec.role} ({self.spec.model})", e))
        self._count(stage, calls=1, **{k: v for k, v in response.usage.items() if isinstance(v, int)})
        if response.error is not None or response.text is None:
            self._count(stage, failed=1)
            return Reply(None, error=f"{self.spec.role} ({self.spec.model}): {response.error or 'empty reply'}")
        cache.put(key, stage, {"text": response.text, "usage": response.usage})
        return Reply(response.text, usage=response.usage)

    def _count(self, stage: str, **amounts: int) -> None:
        with self._counts_lock:
            self.counts.update(amounts)
            self.by_stage.setdefault(stage, Counter()).update(amounts)


@lru_cache(maxsize=64)
def _decode(data: bytes) -> Image.Image:
    """A screenshot decoded once for all the calls about its page (the same image object each time, so
    API backends encode it once too)."""
    with Image.open(io.BytesIO(data)) as image:
        return image.convert("RGB")


def build_roles(specs: Sequence[RoleSpec]) -> dict[str, Role]:
    """A Role per spec; roles played by the same backend with the same arguments share one model (and,
    for a local one, the lock that lets one call at a time reach it)."""
    models: dict[str, tuple[Model, threading.Lock]] = {}
    roles = {}
    for spec in specs:
        kind = MODELS.get(spec.model)
        key = content_key(spec.model, spec.args)
        if key not in models:
            args = parse_args(kind.Args, spec.args, where=f"--{spec.role} model args ({spec.model})")
            models[key] = (kind(args), threading.Lock())
        roles[spec.role] = Role(spec, *models[key])
    return roles
