"""Stage 2, task-related visual patterns (MMBench-Live Algorithm 1): sample a ratio rho of an atomic
task's instances, have a VLM role extract the patterns recurring across them under each of five
perspectives, and an LLM role consolidate the union into a compact set B_t, each pattern marked
central or peripheral."""

from __future__ import annotations

import io
import math
import random
from concurrent.futures import Executor

from fastmmeval.evolve.ask import ask
from fastmmeval.evolve.benchmark import Benchmark
from fastmmeval.evolve.records import Failure
from fastmmeval.evolve.replies import MAX_PATTERNS, PERSPECTIVES, SCHEMAS
from fastmmeval.evolve.spec import AtomicSpec, Pattern
from fastmmeval.live.roles import Role
from fastmmeval.live.store import Blobs, StageCache

MIN_IMAGES = 3
MAX_IMAGES = 8  # shown to the VLM in one call


def sample_rows(benchmark: Benchmark, atomic: str, ratio: float, seed: int) -> list[int]:
    """E'_t = Sample(E_t, rho): ceil(rho * |E_t|) of the task's questions, at least MIN_IMAGES and at
    most MAX_IMAGES (all when it has fewer), seeded."""
    rows = benchmark.questions(atomic)
    n = min(len(rows), max(MIN_IMAGES, min(MAX_IMAGES, math.ceil(ratio * len(rows)))))
    return sorted(random.Random(f"{seed}:{atomic}:patterns").sample(rows, n))


def find_patterns(benchmark: Benchmark, atomic: AtomicSpec, vlm: Role, llm: Role, blobs: Blobs,
                  cache: StageCache, pool: Executor, *, ratio: float = 0.1, seed: int = 0) -> list[Pattern] | Failure:
    """B_t for `atomic`: the five perspectives' extractions run concurrently on `pool`; a Failure when
    any call fails (the task's patterns are then missing, never partial)."""
    rows = sample_rows(benchmark, atomic.name, ratio, seed)
    images = [(blobs.put(_png(benchmark, r), ".png"), ".png") for r in rows]
    questions = "\n".join(f"{i + 1}. {benchmark.example(r)['question']}" for i, r in enumerate(rows))
    base = {"task": benchmark.task, "atomic": atomic.name, "purpose": atomic.purpose, "questions": questions}

    def extract(perspective: str) -> list[Pattern] | Failure:
        values = {**base, "perspective": perspective, "perspective_help": PERSPECTIVES[perspective]}
        return ask(vlm, "pattern_extract", values, images, blobs, cache, SCHEMAS["pattern_extract"],
                   f"{atomic.name}/{perspective}",
                   lambda r: [Pattern(perspective, p["pattern"], p["role"]) for p in r["patterns"]])

    found = list(pool.map(extract, PERSPECTIVES))
    for f in found:
        if isinstance(f, Failure):
            return f
    union = [p for ps in found for p in ps]  # type: ignore[union-attr]
    listed = "\n".join(f"- [{p.role}] {p.perspective}: {p.pattern}" for p in union)
    values = {"atomic": atomic.name, "purpose": atomic.purpose, "patterns": listed,
              "perspectives": ", ".join(PERSPECTIVES), "limit": MAX_PATTERNS}
    return ask(llm, "pattern_consolidate", values, [], blobs, cache, SCHEMAS["pattern_consolidate"], atomic.name,
               lambda r: [Pattern(p["perspective"], p["pattern"], p["role"]) for p in r["patterns"]])


def _png(benchmark: Benchmark, row: int) -> bytes:
    out = io.BytesIO()
    benchmark.image(row).convert("RGB").save(out, format="PNG")
    return out.getvalue()
