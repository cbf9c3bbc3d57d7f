"""`evolve run` and its stages: spec -> patterns -> plan -> acquire -> generate -> verify -> export, over a
workspace folder. Each stage is a function here (and an `evolve <stage>` subcommand) that reads what the
stages before it wrote and writes its own file; `run` chains them with the atomic tasks' chains
overlapping (a task's images are generated and verified while other tasks still acquire), and the
calls of each step concurrent (API roles share their adaptive concurrency limit). Every retrieval, role call and
tool run goes through the stage cache, so a rerun after kill -9 repeats none and writes the same files."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from fastmmeval.errors import ConfigError
from fastmmeval.evolve.acquisition import plan_acquisition
from fastmmeval.evolve.controller import control
from fastmmeval.evolve.dedupe import drop_duplicates
from fastmmeval.evolve.generate import generate_item
from fastmmeval.evolve.manifest import manifest
from fastmmeval.evolve.patterns import find_patterns
from fastmmeval.evolve.records import Acquired, Candidate, Failure, Generated, Verified
from fastmmeval.evolve.spec import AtomicSpec, Spec, atomic_names, load_spec, save_spec, write_spec
from fastmmeval.evolve.update import PROMPTS, ROLES, EvolveConfig, Update
from fastmmeval.evolve.verify import verify_item
from fastmmeval.evolve.workspace import Workspace, tagged, untag
from fastmmeval.live.roles import Role

__all__ = ["PROMPTS", "ROLES", "EvolveConfig", "Workspace", "acquire", "export", "generate", "patterns", "plan",
           "run", "spec", "verify"]

# --- the stages, per atomic task --------------------------------------------------------------------


def _spec(update: Update, force: bool = False) -> Spec:
    space, config = update.space, update.config
    if space.spec_path.is_file() and not force:
        return load_spec(space.spec_path)  # the user's edits win over the role's replies
    update.progress.expect("spec")
    paper = config.paper.read_text(encoding="utf-8") if config.paper is not None else ""
    with update.clock("spec"):
        spec = write_spec(update.benchmark, update.roles["writer"], update.blobs, update.cache, paper=paper,
                          seed=config.seed, threads=config.workers)
    update.progress.done("spec", True)
    save_spec(spec, space.spec_path)
    return spec


def _save(update: Update, spec: Spec) -> None:
    with update.lock:
        save_spec(spec, update.space.spec_path)


def _fill(update: Update, spec: Spec, name: str, stage: str, compute: Callable[[AtomicSpec], Any]) -> Failure | None:
    """Stage `stage` (patterns or plan) for atomic task `name` unless its spec has it already: the result
    goes into the spec, which is saved at once; a Failure is returned and the spec left as it was."""
    atomic = spec.atomic[name]
    if getattr(atomic, stage) is not None:
        return None
    update.progress.expect(stage)
    with update.clock(stage):
        got = compute(atomic)
    update.progress.done(stage, not isinstance(got, Failure))
    if isinstance(got, Failure):
        return got
    setattr(atomic, stage, got)
    _save(update, spec)
    return None


def _patterns(update: Update, spec: Spec, name: str) -> Failure | None:
    return _fill(update, spec, name, "patterns", lambda atomic: find_patterns(
        update.benchmark, atomic, update.roles["analyst"], update.roles["writer"], update.blobs, update.cache,
        update.calls, ratio=update.config.ratio, seed=update.config.seed))


def _plan(update: Update, spec: Spec, name: str) -> Failure | None:
    return _fill(update, spec, name, "plan", lambda atomic: plan_acquisition(
        spec.task, atomic, update.roles["writer"], update.blobs, update.cache, sorted(update.sources),
        update.config.queries))


def _acquire(update: Update, spec: Spec, name: str) -> tuple[Acquired, list[Failure]]:
    atomic = spec.atomic[name]
    assert atomic.plan is not None
    source = update.sources.get(atomic.plan.source)
    if source is None:
        raise ConfigError(f"{update.space.spec_path}: atomic.{name}.plan.source: {atomic.plan.source!r} is not a "
                          f"configured image source (configured: {', '.join(sorted(update.sources))})")
    settings = update.config.controller
    rounds: list[dict[str, Any]] = []
    judged: dict[str, tuple[Candidate, bool, str]] = {}
    failures: list[Failure] = []
    source_dropped: list[dict[str, str]] = []

    def counted(n: int) -> None:
        update.progress.expect("judge", n)
        update.progress.done("judge", True, n)

    with update.clock("acquire"):
        controls = _map(update.items, lambda q0: control(q0, atomic, source, update.roles["judge"],
                                                         update.roles["writer"], update.blobs, update.cache,
                                                         update.calls, settings, progress=counted),
                        [(q,) for q in atomic.plan.queries])
        for q0, controlled in zip(atomic.plan.queries, controls, strict=True):
            rounds.append({"q0": q0, "rounds": [r.record() for r in controlled.rounds], "query": controlled.query})
            failures += controlled.failures
            source_dropped += controlled.dropped
            for candidate, judgment in controlled.judged:
                if candidate.sha in judged:
                    continue
                if isinstance(judgment, Failure):
                    judged[candidate.sha] = (candidate, False, f"judge failed: {judgment.reason}")
                else:
                    why = "; ".join(judgment.rationales)
                    judged[candidate.sha] = (candidate, judgment.accept, "" if judgment.accept else f"judge: {why}")
        accepted = [c for c, ok, _ in judged.values() if ok]
        dropped = [*source_dropped, *({"sha": c.sha, "reason": why} for c, ok, why in judged.values() if not ok)]
        kept, duplicates = drop_duplicates(accepted, update.blobs, update.near_copies())
        dropped += duplicates
        for c in kept[update.config.images:]:
            dropped.append({"sha": c.sha, "reason": f"beyond the {update.config.images} images generated from"})
        kept = kept[: update.config.images]
    update.progress.add("judge", "accepted", len(accepted))
    queries = " | ".join(r["query"] for r in rounds)
    return Acquired(name, rounds, queries, [c.record() for c in kept], dropped), failures


def _generate_one(update: Update, spec: Spec, atomic: str, index: int, candidate: Candidate) -> Generated | Failure:
    update.progress.expect("generate")
    with update.clock("generate"):
        got = generate_item(spec.task, spec.atomic[atomic], candidate, update.generators, update.roles["comparer"],
                            update.tools, update.blobs, update.cache, update.calls, index=index,
                            mode=update.config.mode, seed=update.config.seed)
    update.progress.done("generate", not isinstance(got, Failure))
    return got


def _verify_one(update: Update, generated: Generated, suffix: str) -> Verified | Failure:
    update.progress.expect("verify")
    with update.clock("verify"):
        got = verify_item(generated, suffix, update.roles["verifier"], update.tools, update.blobs, update.cache)
    update.progress.done("verify", not isinstance(got, Failure))
    if isinstance(got, Verified):
        update.progress.add("verify", "accepted" if got.accepted else "rejected")
    return got


def _kept(acquired: Acquired) -> list[tuple[int, Candidate]]:
    return list(enumerate(Candidate.from_record(c) for c in acquired.kept))


def _generate(update: Update, spec: Spec, acquired: Acquired) -> list[Generated | Failure]:
    return _map(update.items, lambda i, c: _generate_one(update, spec, acquired.atomic, i, c), _kept(acquired))


def _verify(update: Update, acquired: Acquired, generated: Sequence[Generated | Failure]) -> list[Verified | Failure]:
    suffix = {c["sha"]: c["suffix"] for c in acquired.kept}
    return _map(update.items, lambda g: _verify_one(update, g, suffix[g.sha]),
                [(g,) for g in generated if isinstance(g, Generated)])


def _generate_and_verify(update: Update, spec: Spec, acquired: Acquired) -> tuple[list[Any], list[Any]]:
    """Each kept image generated and at once verified (no barrier between the two stages), results in order."""

    def one(index: int, candidate: Candidate) -> tuple[Generated | Failure, Verified | Failure | None]:
        g = _generate_one(update, spec, acquired.atomic, index, candidate)
        return g, (_verify_one(update, g, candidate.suffix) if isinstance(g, Generated) else None)

    done = _map(update.items, one, _kept(acquired))
    return [g for g, _ in done], [v for _, v in done if v is not None]


def _map(pool: Executor, fn: Callable[..., Any], args: list[tuple[Any, ...]]) -> list[Any]:
    """fn over `args` on `pool`, results in order."""
    return list(pool.map(lambda a: fn(*a), args))


# --- the public stage functions -----------------------------------------------------------------------


def _stage(config: EvolveConfig, roles: dict[str, Role] | None, body: Callable[[Update], Any]) -> Any:
    update = Update(config, roles)
    try:
        return body(update)
    finally:
        update.close()


def _names(update: Update, spec: Spec) -> list[str]:
    return atomic_names(spec, update.config.atomic)


def _raise_failures(stage: str, failures: Sequence[Failure | None]) -> None:
    found = [f for f in failures if f is not None]
    if found:
        raise ConfigError(f"evolve {stage}: " + "; ".join(f"{f.subject}: {f.reason}" for f in found)
                          + " (rerun to retry: the finished calls are cached)")


def spec(config: EvolveConfig, roles: dict[str, Role] | None = None, force: bool = False) -> Spec:
    """`evolve spec`: write spec.yaml (kept as it is when it exists, unless `force`)."""
    return _stage(config, roles, lambda u: _spec(u, force))


def patterns(config: EvolveConfig, roles: dict[str, Role] | None = None) -> Spec:
    """`evolve patterns`: Algorithm 1 for every atomic task without patterns in spec.yaml."""

    def body(u: Update) -> Spec:
        s = _spec(u)
        _raise_failures("patterns", _map(u.tasks, lambda n: _patterns(u, s, n), [(n,) for n in _names(u, s)]))
        return s

    return _stage(config, roles, body)


def plan(config: EvolveConfig, roles: dict[str, Role] | None = None) -> Spec:
    """`evolve plan`: the acquisition plan of every atomic task without one in spec.yaml."""

    def body(u: Update) -> Spec:
        s = _ready(u, "patterns")
        _raise_failures("plan", _map(u.tasks, lambda n: _plan(u, s, n), [(n,) for n in _names(u, s)]))
        return s

    return _stage(config, roles, body)


def _ready(u: Update, need: str) -> Spec:
    s = _spec(u)
    missing = [n for n in _names(u, s) if (s.atomic[n].patterns if need == "patterns" else s.atomic[n].plan) is None]
    if missing:
        raise ConfigError(f"{u.space.spec_path}: atomic tasks {missing} have no {need} "
                          f"(run `fastmmeval evolve {'patterns' if need == 'patterns' else 'plan'}` first)")
    return s


def acquire(config: EvolveConfig, roles: dict[str, Role] | None = None) -> dict[str, Acquired]:
    """`evolve acquire`: the feedback-controlled acquisition of every atomic task (acquired.json)."""

    def body(u: Update) -> dict[str, Acquired]:
        s = _ready(u, "plan")
        done = _map(u.tasks, lambda n: _acquire(u, s, n), [(n,) for n in _names(u, s)])
        got = {a.atomic: a for a, _ in done}
        u.space.write_stage("acquired", {n: {"acquired": a.record(), "failures": [f.record() for f in fs]}
                                     for (a, fs), n in zip(done, got, strict=True)})
        return got

    return _stage(config, roles, body)


def _acquired(u: Update) -> dict[str, tuple[Acquired, list[Failure]]]:
    data = u.space.read_stage("acquired", "acquire")
    return {n: (Acquired.from_record(v["acquired"]), [Failure.from_record(f) for f in v["failures"]])
            for n, v in data.items()}


def generate(config: EvolveConfig, roles: dict[str, Role] | None = None) -> dict[str, list[Generated | Failure]]:
    """`evolve generate`: an instance per kept image (generated.json)."""

    def body(u: Update) -> dict[str, list[Generated | Failure]]:
        s = _ready(u, "plan")
        acquired = _acquired(u)
        done = _map(u.tasks, lambda a: _generate(u, s, a), [(acquired[n][0],) for n in acquired])
        got = dict(zip(acquired, done, strict=True))
        u.space.write_stage("generated", {n: [tagged(g) for g in gs] for n, gs in got.items()})
        return got

    return _stage(config, roles, body)


def verify(config: EvolveConfig, roles: dict[str, Role] | None = None) -> dict[str, list[Verified | Failure]]:
    """`evolve verify`: every generated instance run through its plan and the verifier (verified.json)."""

    def body(u: Update) -> dict[str, list[Verified | Failure]]:
        acquired = _acquired(u)
        data = u.space.read_stage("generated", "generate")
        generated = {n: [untag(g, Generated) for g in gs] for n, gs in data.items()}
        done = _map(u.tasks, lambda n: _verify(u, acquired[n][0], generated[n]), [(n,) for n in generated])
        got = dict(zip(generated, done, strict=True))
        u.space.write_stage("verified", {n: [tagged(v) for v in vs] for n, vs in got.items()})
        return got

    return _stage(config, roles, body)


def export(config: EvolveConfig, roles: dict[str, Role] | None = None) -> Path:
    """`evolve export`: the verified instances as `<task>_live_v<N>` (dataset, task file, manifest) and
    the review sheet; returns the dataset folder."""
    return _stage(config, roles, _export)


def run(config: EvolveConfig, roles: dict[str, Role] | None = None) -> Path:
    """`evolve run`: every stage, each atomic task's chain (patterns -> plan -> acquire -> generate ->
    verify) running alongside the others', then export; returns the dataset folder."""

    def body(u: Update) -> Path:
        s = _spec(u)

        def chain(name: str) -> tuple[Acquired | None, list[Failure], list[Any], list[Any]]:
            failure = _patterns(u, s, name) or _plan(u, s, name)
            if failure is not None:
                return None, [failure], [], []
            acquired, failures = _acquire(u, s, name)
            return acquired, failures, *_generate_and_verify(u, s, acquired)

        names = _names(u, s)
        done = dict(zip(names, _map(u.tasks, chain, [(n,) for n in names]), strict=True))
        stopped = [fs[0] for a, fs, _, _ in done.values() if a is None]
        _raise_failures("run", stopped)
        u.space.write_stage("acquired", {n: {"acquired": a.record(), "failures": [f.record() for f in fs]}
                                     for n, (a, fs, _, _) in done.items()})
        u.space.write_stage("generated", {n: [tagged(g) for g in gs] for n, (_, _, gs, _) in done.items()})
        u.space.write_stage("verified", {n: [tagged(v) for v in vs] for n, (_, _, _, vs) in done.items()})
        return _export(u)

    return _stage(config, roles, body)


# --- export and the manifest --------------------------------------------------------------------------


def _export(u: Update) -> Path:
    from fastmmeval.evolve.dataset import export_version
    from fastmmeval.evolve.review import write_review_sheet

    acquired = _acquired(u)
    data = u.space.read_stage("verified", "verify")
    verified = {n: [untag(v, Verified) for v in vs] for n, vs in data.items()}
    generated = {n: [untag(g, Generated) for g in gs]
                 for n, gs in u.space.read_stage("generated", "generate").items()}
    candidates = {c["sha"]: Candidate.from_record(c) for a, _ in acquired.values() for c in a.kept}
    accepted, seen, skipped = [], set(), []
    for name in sorted(verified):
        for v in verified[name]:
            if isinstance(v, Verified) and v.accepted:
                sha = v.generated["sha"]
                if sha in seen:  # the same image acquired for two atomic tasks: the first (by name) keeps it
                    skipped.append({"atomic": name, "sha": sha, "reason": "its image is in an earlier atomic task"})
                    continue
                seen.add(sha)
                accepted.append((v, candidates[sha]))
    written = manifest(u, acquired, generated, verified, skipped)
    out = u.space.dataset_dir(u.config.version)
    folder = export_version(u.benchmark, accepted, u.blobs, out, u.config.version, per_task=u.config.per_task,
                            seed=u.config.seed, manifest=written)
    write_review_sheet(folder, u.space.review_path(u.config.version), seed=u.config.seed)
    return folder
