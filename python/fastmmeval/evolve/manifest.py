"""The manifest of an update: per atomic task every controller round, what was judged, kept, dropped,
generated, verified and rejected (each with its reason); the roles and their calls, the calls and tokens
per prompt, the prompts' ids and hashes, the backends' usage, and the seconds per stage."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

from fastmmeval.evolve.ask import evolve_prompt
from fastmmeval.evolve.records import Acquired, Failure, Generated, Verified
from fastmmeval.evolve.update import PROMPTS, Update
from fastmmeval.live.roles import Role
from fastmmeval.live.store import content_key


def calls_by_prompt(roles: Iterable[Role]) -> dict[str, dict[str, int]]:
    """Per prompt, over every role: calls made, answered from the cache, failed, and the tokens the
    backends reported."""
    total: dict[str, Counter[str]] = {}
    for role in roles:
        for stage, counts in role.by_stage.items():
            total.setdefault(stage, Counter()).update(counts)
    return {stage: dict(sorted(c.items())) for stage, c in sorted(total.items())}


def busy_seconds(spans: list[tuple[float, float]]) -> float:
    """The length of the union of (start, end) spans: the time a stage was busy on any thread."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def manifest(u: Update, acquired: dict[str, tuple[Acquired, list[Failure]]],
              generated: dict[str, list[Generated | Failure]], verified: dict[str, list[Verified | Failure]],
              skipped: list[dict[str, str]]) -> dict[str, Any]:
    """The manifest of update `u` from its stages' records (`skipped`: accepted items left out before export)."""
    per_task: dict[str, dict[str, Any]] = {}
    for name, (a, failures) in acquired.items():
        gs, vs = generated.get(name, []), verified.get(name, [])
        ok = [v for v in vs if isinstance(v, Verified)]
        retrieved = len(a.kept) + len(a.dropped)
        per_task[name] = {
            "rounds": a.rounds,
            "acquire": {"judged": retrieved, "kept": len(a.kept), "dropped": len(a.dropped),
                        "judge_failed": len(failures)},
            "generate": {"in": len(a.kept), "out": sum(isinstance(g, Generated) for g in gs),
                         "failed": sum(isinstance(g, Failure) for g in gs)},
            "verify": {"in": len(ok) + sum(isinstance(v, Failure) for v in vs),
                       "accepted": sum(v.accepted for v in ok), "rejected": sum(not v.accepted for v in ok),
                       "failed": sum(isinstance(v, Failure) for v in vs),
                       "acceptance": round(sum(v.accepted for v in ok) / len(ok), 4) if ok else None},
            "failures": [f.record() for f in failures] + [g.record() for g in gs if isinstance(g, Failure)]
                        + [v.record() for v in vs if isinstance(v, Failure)],
            "rejected": [{"sha": v.generated["sha"], "reason": v.reason} for v in ok if not v.accepted],
            "dropped": a.dropped,
        }
    models: dict[str, Any] = {}
    for role in u.roles.values():
        models.setdefault(content_key(role.spec.model, role.spec.args), role.model)
    return {
        "task": u.config.task,
        "version": u.config.version,
        "settings": {"ratio": u.config.ratio, "queries": u.config.queries, "k": u.config.controller.k,
                     "tau": u.config.controller.tau, "m": u.config.controller.m,
                     "retrieve": u.config.controller.retrieve, "images": u.config.images, "mode": u.config.mode,
                     "seed": u.config.seed, "per_task": u.config.per_task},
        "sources": {name: s.fingerprint() for name, s in sorted(u.sources.items())},
        "tools": u.tools.fingerprint(),
        "stages": {s: dict(c) for s, c in u.progress.counts.items()},
        "atomic": per_task,
        "skipped": skipped,
        "roles": {name: {"model": r.spec.model, "name": r.name, "args": r.spec.args, "calls": dict(r.counts)}
                  for name, r in sorted(u.roles.items())},
        "prompts": {evolve_prompt(n).id: evolve_prompt(n).sha256 for n in PROMPTS},
        "calls": calls_by_prompt(u.roles.values()),
        "usage": [m.usage() for m in models.values()],
        "seconds": {**{s: round(busy_seconds(v), 3) for s, v in u.busy.items()},
                    "wall": round(time.monotonic() - u.started, 3)},
    }
