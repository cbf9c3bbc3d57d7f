"""Stage 1, the structured benchmark spec (MMBench-Live Section 3.1): the evaluation purpose and format,
the task hierarchy (ability -> atomic tasks) and, per atomic task, its purpose, data sources and
construction, QA examples drawn from the benchmark, its option counts, and what later stages add: the
task-related visual patterns B_t (Algorithm 1) and the acquisition plan P_t. Written by an LLM role
from the task's docs (and an optional paper text), saved as YAML a user may edit: later stages read
the file, not the role's replies."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fastmmeval.errors import ConfigError, FastmmevalError
from fastmmeval.evolve.ask import ask
from fastmmeval.evolve.benchmark import Benchmark
from fastmmeval.evolve.records import Failure
from fastmmeval.evolve.replies import FIELDS, PERSPECTIVES, SCHEMAS
from fastmmeval.live.roles import Role
from fastmmeval.live.store import Blobs, StageCache
from fastmmeval.util import write_bytes_atomic

MAX_DOCS_CHARS = 6000  # of the task docs and of the paper text shown to the spec role


class SpecError(FastmmevalError):
    """The spec could not be written (a role's call or reply failed) or read."""


@dataclass
class Pattern:
    """A task-related visual pattern: its perspective (one of PERSPECTIVES), text, and role."""

    perspective: str
    pattern: str
    role: str  # central | peripheral


@dataclass
class AcquisitionPlan:
    """P_t = <F_t fields to keep, A_t strategy (a configured source and why), Q_t queries>."""

    fields: list[str]
    source: str
    why: str
    queries: list[str]


@dataclass
class AtomicSpec:
    """One atomic task: the leaf of the hierarchy new instances are built for."""

    name: str
    ability: str
    purpose: str
    data_sources: str
    questions: int
    option_counts: dict[int, int]
    examples: list[dict[str, Any]]
    patterns: list[Pattern] | None = None
    plan: AcquisitionPlan | None = None

    def patterns_text(self) -> str:
        """B_t as prompts show it: one line per pattern, central ones first."""
        if not self.patterns:
            return "(none found)"
        ordered = sorted(self.patterns, key=lambda p: p.role != "central")
        return "\n".join(f"- [{p.role}] {p.perspective}: {p.pattern}" for p in ordered)

    def examples_text(self) -> str:
        """The QA examples as prompts show them."""
        return "\n".join(example_text(e) for e in self.examples) or "(none)"


@dataclass
class Spec:
    """The whole benchmark's spec."""

    task: str
    purpose: str
    format: str
    hierarchy: dict[str, list[str]]
    atomic: dict[str, AtomicSpec] = field(default_factory=dict)


def example_text(example: dict[str, Any]) -> str:
    """One QA example in a line or two: hint, question, lettered options and the answer."""
    options = " ".join(f"{chr(65 + i)}. {o}" for i, o in enumerate(example["options"]))
    hint = f"(hint: {example['hint']}) " if example.get("hint") else ""
    return f"- {hint}{example['question']} Options: {options} Answer: {example['answer']}"


def hierarchy(benchmark: Benchmark) -> dict[str, list[str]]:
    """Ability -> its atomic tasks, as the benchmark's rows say (one ability 'all' when it has none)."""
    tree: dict[str, list[str]] = {}
    for atomic in benchmark.atomic_tasks():
        tree.setdefault(benchmark.ability(atomic) or "all", []).append(atomic)
    return tree


def draw_examples(benchmark: Benchmark, atomic: str, n: int, seed: int) -> list[dict[str, Any]]:
    """`n` of the atomic task's questions (seeded), as {question, hint, options, answer}."""
    rows = benchmark.questions(atomic)
    picked = sorted(random.Random(f"{seed}:{atomic}").sample(rows, min(n, len(rows))))
    return [benchmark.example(r) for r in picked]


def write_spec(benchmark: Benchmark, role: Role, blobs: Blobs, cache: StageCache, *, paper: str = "",
               examples: int = 3, seed: int = 0, threads: int = 8,
               progress: Callable[[], None] | None = None) -> Spec:
    """The benchmark's spec: one call for its purpose and format, one per atomic task for the task's
    purpose and data sources (concurrently); SpecError listing every call that failed."""
    tree = hierarchy(benchmark)
    docs = benchmark.description()[:MAX_DOCS_CHARS]
    drawn = {a: draw_examples(benchmark, a, examples, seed) for a in benchmark.atomic_tasks()}
    shown = [e for a in benchmark.atomic_tasks()[:6] for e in drawn[a][:1]]
    values = {"task": benchmark.task, "docs": docs or "(none)", "paper": paper[:MAX_DOCS_CHARS] or "(none)",
              "hierarchy": "\n".join(f"- {k}: {', '.join(v)}" for k, v in tree.items()),
              "examples": "\n".join(example_text(e) for e in shown)}
    top = ask(role, "spec_benchmark", values, [], blobs, cache, SCHEMAS["spec_benchmark"], benchmark.task, dict)
    if isinstance(top, Failure):
        raise SpecError(f"spec of {benchmark.task}: {top.reason}")

    def one(atomic: str) -> AtomicSpec | Failure:
        v = {"task": benchmark.task, "purpose": top["purpose"], "atomic": atomic,
             "ability": benchmark.ability(atomic) or "all", "docs": docs or "(none)",
             "count": len(benchmark.questions(atomic)), "examples": "\n".join(example_text(e) for e in drawn[atomic])}
        got = ask(role, "spec_atomic", v, [], blobs, cache, SCHEMAS["spec_atomic"], atomic, dict)
        if progress is not None:
            progress()
        if isinstance(got, Failure):
            return got
        return AtomicSpec(atomic, benchmark.ability(atomic) or "all", got["purpose"], got["data_sources"],
                          len(benchmark.questions(atomic)), dict(sorted(benchmark.option_counts(atomic).items())),
                          drawn[atomic])

    with ThreadPoolExecutor(threads) as pool:
        done = list(pool.map(one, benchmark.atomic_tasks()))
    failed = [d for d in done if isinstance(d, Failure)]
    if failed:
        raise SpecError("; ".join(f"spec of atomic task {f.subject}: {f.reason}" for f in failed))
    atomic = {a.name: a for a in done if isinstance(a, AtomicSpec)}
    return Spec(benchmark.task, top["purpose"], top["format"], tree, atomic)


# --- the YAML file ---------------------------------------------------------------------------------


def save_spec(spec: Spec, path: Path) -> None:
    """Write `spec` to `path` as YAML (atomically), in the order a reader meets it."""
    data = asdict(spec)
    data["atomic"] = {name: _drop_none(a) for name, a in data["atomic"].items()}
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
    write_bytes_atomic(path, text.encode("utf-8"))


def _drop_none(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if v is not None}


def load_spec(path: Path) -> Spec:
    """The spec in `path`, as written by save_spec and perhaps edited: a ConfigError naming the file and
    the field for anything a later stage could not use."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: not a readable spec ({str(e).splitlines()[0]})") from None
    where = str(path)
    need = _Need(where)
    data = need.mapping(data, "")
    tree = {str(k): [str(a) for a in need.strings(v, f"hierarchy.{k}")]
            for k, v in need.mapping(data.get("hierarchy"), "hierarchy").items()}
    atomic = {}
    for name, raw in need.mapping(data.get("atomic"), "atomic").items():
        at = f"atomic.{name}"
        raw = need.mapping(raw, at)
        patterns = None
        if raw.get("patterns") is not None:
            patterns = [_pattern(need, p, f"{at}.patterns[{i}]") for i, p in enumerate(raw["patterns"])]
        plan = None
        if raw.get("plan") is not None:
            p = need.mapping(raw["plan"], f"{at}.plan")
            fields = need.strings(p.get("fields"), f"{at}.plan.fields")
            unknown = sorted(set(fields) - set(FIELDS))
            if unknown:
                raise ConfigError(f"{where}: {at}.plan.fields: {unknown} are not among {list(FIELDS)}")
            plan = AcquisitionPlan(fields, need.text(p.get("source"), f"{at}.plan.source"),
                                   str(p.get("why") or ""), need.strings(p.get("queries"), f"{at}.plan.queries"))
        counts = {int(k): int(v) for k, v in need.mapping(raw.get("option_counts"), f"{at}.option_counts").items()}
        if not counts or any(k < 2 for k in counts):
            raise ConfigError(f"{where}: {at}.option_counts: expected option counts of 2 or more, got {counts}")
        atomic[str(name)] = AtomicSpec(str(name), need.text(raw.get("ability"), f"{at}.ability"),
                                       need.text(raw.get("purpose"), f"{at}.purpose"),
                                       need.text(raw.get("data_sources"), f"{at}.data_sources"),
                                       int(raw.get("questions") or 0), counts, list(raw.get("examples") or []),
                                       patterns, plan)
    return Spec(need.text(data.get("task"), "task"), need.text(data.get("purpose"), "purpose"),
                need.text(data.get("format"), "format"), tree, atomic)


def _pattern(need: _Need, raw: Any, at: str) -> Pattern:
    p = need.mapping(raw, at)
    perspective = need.text(p.get("perspective"), f"{at}.perspective")
    if perspective not in PERSPECTIVES:
        raise ConfigError(f"{need.where}: {at}.perspective: {perspective!r} is not one of {list(PERSPECTIVES)}")
    role = need.text(p.get("role"), f"{at}.role")
    if role not in ("central", "peripheral"):
        raise ConfigError(f"{need.where}: {at}.role: expected central or peripheral, got {role!r}")
    return Pattern(perspective, need.text(p.get("pattern"), f"{at}.pattern"), role)


@dataclass
class _Need:
    where: str

    def mapping(self, value: Any, at: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise ConfigError(f"{self.where}: {at or 'the file'}: expected a mapping, got {type(value).__name__}")
        return value

    def text(self, value: Any, at: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{self.where}: {at}: expected a non-empty text, got {value!r}")
        return value

    def strings(self, value: Any, at: str) -> list[str]:
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
            raise ConfigError(f"{self.where}: {at}: expected a non-empty list of texts, got {json.dumps(value)[:80]}")
        return list(value)


def atomic_names(spec: Spec, only: Iterable[str] | None) -> list[str]:
    """The spec's atomic tasks, or those of `only` (each must be in the spec)."""
    if only is None:
        return list(spec.atomic)
    names = list(only)
    unknown = [n for n in names if n not in spec.atomic]
    if unknown:
        raise ConfigError(f"atomic tasks {unknown} are not in the spec of {spec.task} (has: {', '.join(spec.atomic)})")
    return names
