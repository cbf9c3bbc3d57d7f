"""The model backend interface and `--model_args` parsing."""

from __future__ import annotations

import dataclasses
import difflib
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any, ClassVar, TypeVar

from fastmmeval.errors import ConfigError
from fastmmeval.protocol import Request, Response
from fastmmeval.registry import Registry


class Model(ABC):
    """A backend: answers batches of Requests. Subclasses declare their `--model_args` as a
    dataclass `Args` and are built by `from_args`."""

    name: ClassVar[str]
    Args: ClassVar[type]

    @classmethod
    def from_args(cls, raw: dict[str, str]) -> Model:
        """Build the backend from `--model_args` strings (checked and typed against `Args`)."""
        return cls(parse_args(cls.Args, raw, where=f"--model_args for model {cls.name!r}"))

    @abstractmethod
    def __init__(self, args: Any) -> None: ...

    @abstractmethod
    def generate(self, requests: list[Request]) -> list[Response]:
        """One Response with `text` (or `error`) per generate request, in order."""

    @abstractmethod
    def loglikelihood(self, requests: list[Request]) -> list[Response]:
        """One Response with per-continuation `logprobs` (or `error`) per request, in order."""

    def respond(self, requests: Iterable[Request], batch_size: int) -> Iterator[Response]:
        """A Response for each request (generate or loglikelihood), yielded as soon as it is
        ready, in any order. By default `batch_size` requests at a time go to `generate` and
        `loglikelihood`; a backend that batches continuously overrides this to keep its batch full
        across those groups."""
        source = iter(requests)
        while group := list(islice(source, batch_size)):
            yield from self.answer_batch(group)

    def answer_batch(self, requests: list[Request]) -> list[Response]:
        """One Response per request, in order: generate and loglikelihood requests each go to
        their method in one call."""
        out: dict[str, Response] = {}
        for kind, method in (("generate", self.generate), ("loglikelihood", self.loglikelihood)):
            group = [r for r in requests if r.kind == kind]
            if not group:
                continue
            responses = method(group)
            if [r.request_id for r in responses] != [r.id for r in group]:
                raise RuntimeError(f"model {self.name!r} answered requests out of order or incompletely")
            out.update((r.request_id, r) for r in responses)
        return [out[r.id] for r in requests]

    def prepare(self, request: Request) -> None:  # noqa: B027 (optional hook, no-op by default)
        """Optional: do this request's input work (e.g. image preprocessing) ahead of its batch.
        Called from the evaluator's background pool; a backend that has nothing to do ignores it."""

    def overlaps_input_work(self) -> bool:
        """Whether input work (a doc's image decoding and `prepare`) may run beside this model's
        compute: True unless the model computes on this machine's cores and leaves none free."""
        return True

    @abstractmethod
    def fingerprint(self) -> dict[str, Any]:
        """What identifies this model's outputs: weights, revisions, settings."""

    def default_batch_size(self) -> int:
        """Requests per call when `--batch_size` is not given."""
        return 1

    def usage(self) -> dict[str, Any]:
        """Counts of what this model has used so far in this process (API calls, tokens, cost),
        recorded in results.json; empty for backends that count nothing."""
        return {}


MODELS: Registry[type[Model]] = Registry("model")

T = TypeVar("T")
R = TypeVar("R")


def add_usage(earlier: dict[str, Any], now: dict[str, Any]) -> dict[str, Any]:
    """Two `usage()` records summed key by key (nested ones too), e.g. a resumed run's and its own."""
    out = dict(earlier)
    for key, value in now.items():
        before = earlier.get(key)
        if isinstance(value, dict):
            out[key] = add_usage(before if isinstance(before, dict) else {}, value)
        elif isinstance(value, int | float) and isinstance(before, int | float):
            out[key] = before + value
        else:
            out[key] = value
    return out


def failure_reason(what: str, error: BaseException) -> str:
    """'<what>: <ErrorType>: <first line of its message>' for a Response's `error`."""
    detail = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{what}: {type(error).__name__}" + (f": {detail}" if detail else "")


def each_or_alone(call: Callable[[list[T]], list[R]], items: list[T]) -> list[R | Exception]:
    """`call(items)`; when that raises, `call([item])` for each item, so that only the items at
    fault end up as their exception and the others still get their result."""
    try:
        return list(call(items))
    except Exception:
        out: list[R | Exception] = []
        for item in items:
            try:
                out.append(call([item])[0])
            except Exception as e:
                out.append(e)
        return out


def parse_model_args(text: str) -> dict[str, str]:
    """'k=v,k2=v2' -> {'k': 'v', 'k2': 'v2'} (values may contain '=')."""
    out: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in (text or "").split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--model_args: expected key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def parse_args(schema: type, raw: dict[str, str], where: str) -> Any:
    """Fill dataclass `schema` from strings, converting to each field's type."""
    fields = {f.name: f for f in dataclasses.fields(schema)}
    hints = typing.get_type_hints(schema)
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in fields:
            close = difflib.get_close_matches(key, fields, n=2, cutoff=0.5)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ConfigError(f"{where}: unknown argument {key!r}{hint} (accepted: {', '.join(fields)})")
        values[key] = _convert(value, hints[key], f"{where}: {key}")
    try:
        return schema(**values)
    except TypeError as e:
        raise ConfigError(f"{where}: {e}") from None


def _convert(value: str, hint: Any, where: str) -> Any:
    kinds = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    kind = kinds[0]
    if kind is bool:
        if value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            raise ConfigError(f"{where}: expected {kind.__name__}, got {value!r}") from None
    return value
