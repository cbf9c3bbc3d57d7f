"""Stage 6, QA generation (MMBench-Live Section 3.3): for one accepted image of an atomic task, one or
several generator roles write z = (question, options, answer, solution plan pi) with the benchmark's
option count for that task; pi is a declarative list of tool steps (evolve.solution), never code.
With several generators: round-robin over the images, or all of them and the best picked by a
comparison role among the candidates that pass the rule checks."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Any

from fastmmeval.errors import FastmmevalError
from fastmmeval.evolve.ask import ask
from fastmmeval.evolve.records import Candidate, Failure, Generated
from fastmmeval.evolve.replies import compare_schema, generate_schema, letters
from fastmmeval.evolve.solution import check_plan, plan_schema
from fastmmeval.evolve.spec import AtomicSpec
from fastmmeval.evolve.tools import ToolBox
from fastmmeval.live.roles import Role
from fastmmeval.live.store import Blobs, StageCache

MODES = ("round-robin", "all")


class RuleError(FastmmevalError):
    """A generated instance that breaks a rule its schema cannot state."""


def option_count(atomic: AtomicSpec, sha: str, seed: int) -> int:
    """How many options the question about image `sha` has: drawn (seeded by the image) from the
    task's own distribution of option counts, so the new version keeps it."""
    counts = sorted(atomic.option_counts.items())
    rng = random.Random(f"{seed}:{atomic.name}:{sha}")
    return rng.choices([n for n, _ in counts], weights=[w for _, w in counts])[0]


def check_rules(reply: dict[str, Any], tools: ToolBox) -> dict[str, Any]:
    """`reply` with its plan checked (evolve.solution.check_plan) and held to the rules: distinct,
    non-empty options and a question that does not state its own answer."""
    options = [o.strip() for o in reply["options"]]
    if len({o.casefold() for o in options}) != len(options) or not all(options):
        raise RuleError(f"options repeat or are empty: {options}")
    answer = options[letters(len(options)).index(reply["answer"])]
    if len(answer) > 3 and answer.casefold() in reply["question"].casefold():
        raise RuleError(f"the question states its answer {answer!r}")
    steps = check_plan(reply["plan"], tools)
    return {**reply, "options": options, "plan": [s.record() for s in steps]}


def generate_item(task: str, atomic: AtomicSpec, candidate: Candidate, generators: Sequence[Role],
                  comparer: Role | None, tools: ToolBox, blobs: Blobs, cache: StageCache, pool: Executor, *,
                  index: int, mode: str = "round-robin", seed: int = 0) -> Generated | Failure:
    """The instance for `candidate` (the `index`-th image of its task): by generator index mod G in
    round-robin mode, by every generator (concurrently) and the comparer's pick in `all` mode."""
    n = option_count(atomic, candidate.sha, seed)
    values = {"task": task, "atomic": atomic.name, "purpose": atomic.purpose, "patterns": atomic.patterns_text(),
              "examples": atomic.examples_text(), "context": candidate.describe(), "options": n,
              "letters": ", ".join(letters(n)), "tools": tools.catalog()}
    schema = generate_schema(n, plan_schema(tools))
    subject = f"{atomic.name}/{candidate.sha[:12]}"
    image = [(candidate.sha, candidate.suffix)]
    chosen = [generators[index % len(generators)]] if mode == "round-robin" else list(generators)

    def one(role: Role) -> tuple[Role, dict[str, Any] | Failure]:
        return role, ask(role, "generate", values, image, blobs, cache, schema, subject,
                         lambda r: check_rules(r, tools))

    answered = list(pool.map(one, chosen))
    good = [(role, r) for role, r in answered if not isinstance(r, Failure)]
    if not good:
        failures = [r for _, r in answered if isinstance(r, Failure)]
        if len(failures) == 1:
            return failures[0]
        return Failure("generate", subject, "; ".join(f.reason for f in failures), failures[0].raw)
    pick, chosen_by = 0, "only"
    if len(good) > 1:
        chosen_by = "rules"  # the first that passed, should the comparison fail
        if comparer is not None:
            shown = "\n".join(f"{i}. {json.dumps(r, ensure_ascii=False)}" for i, (_, r) in enumerate(good))
            best = ask(comparer, "compare", {"atomic": atomic.name, "purpose": atomic.purpose, "candidates": shown},
                       image, blobs, cache, compare_schema(len(good)), subject, lambda r: int(r["best"]))
            if not isinstance(best, Failure):
                pick, chosen_by = best, "compare"
    role, reply = good[pick]
    return Generated(atomic.name, candidate.sha, reply["question"].strip(), reply["options"], reply["answer"],
                     reply["plan"], role.name, reply["hint"].strip(), len(good), chosen_by)
