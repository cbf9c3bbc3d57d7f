"""A judge: a registered backend (normally `openai`, pointed at an API or at `fastmmeval serve`)
asked a versioned prompt, its replies read by the repairing parser. Which backend, base URL and key
variable it uses come from `--judge_model`/`--judge_args` or a `--judge_config` file."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastmmeval.errors import ConfigError
from fastmmeval.judge.parse import JudgmentError
from fastmmeval.judge.prompts import PROMPTS, JudgeInput, JudgePrompt
from fastmmeval.models.base import MODELS, Model, failure_reason, parse_args, parse_model_args
from fastmmeval.protocol import GenerationSettings, ImagePart, Message, Request, TextPart

JUDGE_SETTINGS = GenerationSettings(max_new_tokens=512, temperature=0.0, seed=0)


@dataclass(frozen=True)
class JudgeSpec:
    """One judge of a run: its name (how samples and agreement refer to it), backend and args."""

    name: str
    model: str
    args: dict[str, str] = field(default_factory=dict)


def judge_specs(judge_model: str | None, judge_args: str = "", judge_config: Path | None = None) -> list[JudgeSpec]:
    """The run's judges, the first one deciding scores: from the flags (one judge named "judge")
    and/or a JSON or YAML config file: `{"judges": [{"name": ..., "model": ..., "args": {...}}]}`
    (or one such judge mapping)."""
    specs: list[JudgeSpec] = []
    if judge_model:
        specs.append(JudgeSpec("judge", judge_model, parse_model_args(judge_args)))
    elif judge_args:
        raise ConfigError("--judge_args given without --judge_model")
    if judge_config is not None:
        specs.extend(_config_specs(judge_config))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError(f"judge names must be unique, got {names}")
    for spec in specs:  # unknown backends and arguments fail before any model time is spent
        _judge_args(spec)
    return specs


def _judge_args(spec: JudgeSpec) -> Any:
    return parse_args(MODELS.get(spec.model).Args, spec.args, where=f"judge {spec.name!r} ({spec.model}) args")


def _config_specs(path: Path) -> list[JudgeSpec]:
    from fastmmeval.tasks.yaml_lines import load_yaml

    data = load_yaml(path)  # JSON is YAML too
    entries = data.get("judges", [data])
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"--judge_config {path}: expected a mapping with a `judges` list")
    out = []
    for i, entry in enumerate(entries):
        where = f"--judge_config {path}: judges[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("model"), str):
            raise ConfigError(f"{where}: each judge needs a `model` (a backend name)")
        unknown = set(entry) - {"name", "model", "args"}
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)} (accepted: name, model, args)")
        args = entry.get("args", {})
        if not isinstance(args, dict):
            raise ConfigError(f"{where}: `args` must be a mapping of backend arguments")
        name = entry.get("name", f"judge{i + 1}" if i else "judge")
        out.append(JudgeSpec(str(name), entry["model"], {str(k): str(v) for k, v in args.items()}))
    return out


@dataclass
class Verdict:
    """One judgment: the judge's raw reply, the value read from it, or why there is none."""

    judge: str
    prompt: str
    raw: str | None = None
    value: Any = None
    error: str | None = None

    def record(self) -> dict[str, Any]:
        """The JSON-able form kept in the sample."""
        return {"prompt": self.prompt, "raw": self.raw, "value": self.value, "error": self.error}


class Judge:
    """A judge backend built from its spec; `ask` grades many docs in one backend call, so the
    backend's own concurrency (and its adaptive limits) applies to them."""

    def __init__(self, spec: JudgeSpec, model: Model | None = None) -> None:
        self.spec = spec
        self.model = model or MODELS.get(spec.model)(_judge_args(spec))

    @property
    def name(self) -> str:
        """The judge's name in samples and agreement reports."""
        return self.spec.name

    def fingerprint(self) -> dict[str, Any]:
        """What identifies this judge's verdicts: its backend's fingerprint and the prompt versions."""
        prompts = [p.id for _, p in PROMPTS.items()]
        return {"model": self.spec.model, "backend": self.model.fingerprint(), "prompts": prompts}

    def ask(self, calls: list[tuple[str, JudgePrompt, JudgeInput]]) -> list[Verdict]:
        """A verdict for each (request id, prompt, input), in order; backend failures and
        unreadable replies become verdicts with an `error`, never a made-up value."""
        if not calls:
            return []
        requests = [
            Request(
                f"judge:{self.name}:{rid}",
                "generate",
                (*([Message("system", (TextPart(p.system),))] if p.system else []), _user_turn(p, case)),
                JUDGE_SETTINGS,
                json_schema=json.dumps(p.schema, sort_keys=True) if p.schema is not None else None,
            )
            for rid, p, case in calls
        ]
        try:
            responses = self.model.generate(requests)
        except Exception as e:  # a judge outage must not lose the run's answers
            reason = failure_reason(f"judge '{self.name}'", e)
            return [Verdict(self.name, p.id, error=reason) for _, p, _ in calls]
        out = []
        for (_, prompt, case), response in zip(calls, responses, strict=True):
            verdict = Verdict(self.name, prompt.id, raw=response.text)
            if response.error is not None or response.text is None:
                verdict.error = f"judge '{self.name}': {response.error or 'empty reply'}"
            else:
                try:
                    verdict.value = prompt.read(response.text, case)
                except JudgmentError as e:
                    verdict.error = f"judge '{self.name}': {e}"
            out.append(verdict)
        return out


def _user_turn(prompt: JudgePrompt, case: JudgeInput) -> Message:
    """The judge's user message: the doc's images first where the prompt shows them, then its text."""
    images = tuple(ImagePart(image) for image in case.images) if prompt.images else ()
    return Message("user", (*images, TextPart(prompt.render(case))))
