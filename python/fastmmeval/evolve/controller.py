"""Stage 5, the feedback controller (MMBench-Live Algorithm 2): for each query q_0 of the plan, judge
the top K candidates it retrieves with J(x, c | G_t, B_t) (accept/reject with one to three visual
rationales); stop when the acceptance rate rho reaches tau, else aggregate the rejected candidates'
rationales into feedback r and let the update role U rewrite the query, which the next round
searches; after M rounds the last query is kept. Then retrieve with q* and keep only the candidates
the judge accepts. Every retrieval and every call goes through the stage cache."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass

from fastmmeval.evolve.ask import ask
from fastmmeval.evolve.records import Candidate, Failure, Judgment, Round
from fastmmeval.evolve.replies import SCHEMAS
from fastmmeval.evolve.sources import ImageSource, Retrieved, SourceError
from fastmmeval.evolve.spec import AtomicSpec
from fastmmeval.live.roles import Role
from fastmmeval.live.store import Blobs, StageCache, content_key

MAX_FEEDBACK = 10  # distinct rationales handed to the update role


@dataclass(frozen=True)
class ControllerSettings:
    """K candidates judged per round, the acceptance threshold tau, at most M rounds, and how many
    candidates the final query q* retrieves."""

    k: int = 10
    tau: float = 0.7
    m: int = 3
    retrieve: int = 40


@dataclass
class Controlled:
    """What the controller did for one initial query: its rounds, q*, every candidate judged after
    retrieving with q* (in rank order) with its judgment or the judge's failure, the calls that failed,
    and the images the source looked at and dropped ({url, reason})."""

    rounds: list[Round]
    query: str
    judged: list[tuple[Candidate, Judgment | Failure]]
    failures: list[Failure]
    dropped: list[dict[str, str]]


def retrieve(source: ImageSource, query: str, limit: int, blobs: Blobs, cache: StageCache) -> Retrieved:
    """The source's top `limit` candidates for `query` (and what it dropped, with why), fetched once: a
    rerun reads them from the cache."""
    key = content_key("retrieve", source.name, source.fingerprint(), query, limit)
    hit = cache.get(key)
    if hit is not None:
        return Retrieved((Candidate.from_record(c) for c in hit["candidates"]), hit["dropped"])
    found = source.retrieve(query, limit, blobs)
    cache.put(key, "retrieve", {"candidates": [c.record() for c in found], "dropped": found.dropped})
    return found


def judge(candidate: Candidate, atomic: AtomicSpec, role: Role, blobs: Blobs, cache: StageCache) -> Judgment | Failure:
    """J(x, c | G_t, B_t) on one candidate."""
    values = {"atomic": atomic.name, "purpose": atomic.purpose, "patterns": atomic.patterns_text(),
              "context": candidate.describe()}
    return ask(role, "judge", values, [(candidate.sha, candidate.suffix)], blobs, cache, SCHEMAS["judge"],
               f"{atomic.name}/{candidate.sha[:12]}",
               lambda r: Judgment(candidate.sha, bool(r["accept"]), [t.strip() for t in r["rationales"]]))


def aggregate(judgments: list[Judgment | Failure]) -> list[str]:
    """Agg({r_i | a_i = 0}): the rejected candidates' rationales, each once, in order, at most MAX_FEEDBACK."""
    seen: dict[str, None] = {}
    for j in judgments:
        if isinstance(j, Judgment) and not j.accept:
            for r in j.rationales:
                seen.setdefault(r, None)
    return list(seen)[:MAX_FEEDBACK]


def control(q0: str, atomic: AtomicSpec, source: ImageSource, judge_role: Role, update_role: Role, blobs: Blobs,
            cache: StageCache, pool: Executor, settings: ControllerSettings,
            progress: Callable[[int], None] | None = None) -> Controlled:
    """Algorithm 2 from the initial query `q0`; the judge's calls of a round run concurrently on `pool`."""
    rounds: list[Round] = []
    failures: list[Failure] = []
    query = q0

    def judged(found: list[Candidate]) -> list[Judgment | Failure]:
        out = list(pool.map(lambda c: judge(c, atomic, judge_role, blobs, cache), found))
        failures.extend(j for j in out if isinstance(j, Failure))
        if progress is not None:
            progress(len(out))
        return out

    def fetch(q: str, limit: int) -> Retrieved:
        try:
            return retrieve(source, q, limit, blobs, cache)
        except SourceError as e:  # the source could not be searched: nothing retrieved, never cached
            failures.append(Failure("retrieve", f"{atomic.name}/{q}", str(e)))
            return Retrieved()

    for m in range(settings.m):
        found = fetch(query, settings.k)
        judgments = judged(found)
        # rho over the K retrieved (over fewer when the source returned fewer); a failed judgment accepts nothing
        rho = sum(isinstance(j, Judgment) and j.accept for j in judgments) / max(1, len(found))
        rounds.append(Round(query, [c.sha for c in found], rho))
        if rho >= settings.tau:
            break
        feedback = aggregate(judgments)
        rounds[-1].feedback = feedback
        if m == settings.m - 1:
            break  # q* is the last query searched: no update after the last round
        accepted = round(rho * max(1, len(found)))
        values = {"atomic": atomic.name, "purpose": atomic.purpose, "patterns": atomic.patterns_text(),
                  "query": query, "accepted": accepted, "k": len(found),
                  "feedback": "\n".join(f"- {r}" for r in feedback) or "- (no rationale given)"}
        update = ask(update_role, "update_query", values, [], blobs, cache, SCHEMAS["update_query"],
                     f"{atomic.name}/round {m}", lambda r: r["query"].strip())
        if isinstance(update, Failure):
            failures.append(update)
            break  # the query cannot change: it is q*
        rounds[-1].next_query = update
        query = update
    final = fetch(query, settings.retrieve)
    return Controlled(rounds, query, list(zip(final, judged(final), strict=True)), failures, final.dropped)
