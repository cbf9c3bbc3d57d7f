"""Stage 3, the acquisition plan P_t = <F_t, A_t, Q_t> (MMBench-Live Eq. 1): from the atomic task's
spec and patterns, an LLM role names the fields to keep with each image, the source to use among
those configured, and the queries; its reply is held to a JSON schema."""

from __future__ import annotations

from fastmmeval.evolve.ask import ask
from fastmmeval.evolve.records import Failure
from fastmmeval.evolve.replies import plan_reply_schema
from fastmmeval.evolve.spec import AcquisitionPlan, AtomicSpec
from fastmmeval.live.roles import Role
from fastmmeval.live.store import Blobs, StageCache


def plan_acquisition(task: str, atomic: AtomicSpec, role: Role, blobs: Blobs, cache: StageCache,
                     sources: list[str], queries: int = 2) -> AcquisitionPlan | Failure:
    """P_t for `atomic`, choosing among the configured `sources` (their names), with up to `queries` queries."""
    values = {"task": task, "atomic": atomic.name, "purpose": atomic.purpose, "data_sources": atomic.data_sources,
              "patterns": atomic.patterns_text(), "sources": ", ".join(sources), "queries": queries}

    def read(r: dict) -> AcquisitionPlan:
        qs = list(dict.fromkeys(q.strip() for q in r["queries"] if q.strip()))
        return AcquisitionPlan(sorted(set(r["fields"])), r["strategy"]["source"], r["strategy"]["why"], qs)

    return ask(role, "acquisition_plan", values, [], blobs, cache, plan_reply_schema(sources, queries),
               atomic.name, read)
