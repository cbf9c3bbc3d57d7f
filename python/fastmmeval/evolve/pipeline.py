"""`evolve run` and its stages: spec -> patterns -> plan -> acquire -> generate -> verify -> export, over a
workspace folder. Each stage is a function here (and an `evolve <stage>` subcommand) that reads what the
stages before it wrote and writes its own file; `run` chains them with the atomic tasks' chains
overlapping (a task's images are generated and verified while other tasks still acquire), and the
calls of each step concurrent (API roles share their adaptive concurrency limit). Every retrieval, role call and
tool run goes through the stage cache, so a rerun after kill -9 repeats none and writes the same files."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastmmeval.errors import ConfigError
from fastmmeval.evolve.acquisition import plan_acquisition
from fastmmeval.evolve.ask import evolve_prompt
from fastmmeval.evolve.benchmark import Benchmark, Layout, load_benchmark
from fastmmeval.evolve.controller import ControllerSettings, control
from fastmmeval.evolve.dedupe import NearCopies, drop_duplicates
from fastmmeval.evolve.generate import MODES, generate_item
from fastmmeval.evolve.patterns import find_patterns
from fastmmeval.evolve.records import Acquired, Candidate, Failure, Generated, Verified
from fastmmeval.evolve.sources import ImageSource
from fastmmeval.evolve.spec import AtomicSpec, Spec, atomic_names, load_spec, save_spec, write_spec
from fastmmeval.evolve.tools import ToolBox, default_tools
from fastmmeval.evolve.verify import verify_item
from fastmmeval.live.progress import StageProgress
from fastmmeval.live.roles import Role, RoleSpec, build_roles
from fastmmeval.live.store import Blobs, StageCache, content_key
from fastmmeval.util import write_json_atomic

STAGES = ("spec", "patterns", "plan", "judge", "generate", "verify")  # the progress bars
CLOCKED = ("spec", "patterns", "plan", "acquire", "generate", "verify")  # the manifest's seconds (judge: in acquire)
# The roles: the writer (an LLM) writes the spec, consolidates patterns, plans acquisition and rewrites
# queries; the analyst (a VLM) extracts patterns; the judge (a VLM) is the controller's J; generators
# (VLMs) write instances; the comparer picks among them; the verifier reads only text.
ROLES = ("writer", "analyst", "judge", "comparer", "verifier")
PROMPTS = ("spec_benchmark", "spec_atomic", "pattern_extract", "pattern_consolidate", "acquisition_plan", "judge",
           "update_query", "generate", "compare", "verify")  # fmt: skip


@dataclass(frozen=True)
class Workspace:
    """An update's folder: `spec.yaml` (editable), the stages' files, `work/` (stage cache, blobs) and
    the new version's dataset."""

    root: Path

    @property
    def spec_path(self) -> Path:
        """The benchmark spec (stage 1, with patterns and plans added by stages 2 and 3)."""
        return self.root / "spec.yaml"

    def stage_path(self, stage: str) -> Path:
        """The file of stage `stage` (acquired, generated, verified)."""
        return self.root / f"{stage}.json"

    @property
    def cache_path(self) -> Path:
        """The sqlite stage cache."""
        return self.root / "work" / "cache.sqlite"

    @property
    def blobs(self) -> Blobs:
        """Images (original samples and candidates), named by sha256."""
        return Blobs(self.root / "work" / "blobs")

    def review_path(self, version: int) -> Path:
        """The review sheet of version `version` (a sample of its questions to check by hand)."""
        return self.root / f"review_v{version}.html"

    def dataset_dir(self, version: int) -> Path:
        """Where export writes version `version`."""
        return self.root / f"v{version}"


@dataclass(frozen=True)
class EvolveConfig:
    """One update of benchmark `task` into `out`: the roles (writer, analyst, judge, comparer, verifier
    and one or more `generators`), the image `sources` (the plan's strategy picks one by name), and
    the method's settings."""

    task: str
    out: Path
    roles: tuple[RoleSpec, ...]
    generators: tuple[RoleSpec, ...]
    sources: tuple[ImageSource, ...]
    include_paths: tuple[Path, ...] = ()
    layout: Layout | None = None
    atomic: tuple[str, ...] | None = None
    paper: Path | None = None
    ratio: float = 0.1
    queries: int = 2
    controller: ControllerSettings = field(default_factory=ControllerSettings)
    images: int = 20
    mode: str = "round-robin"
    version: int = 1
    per_task: int | None = None
    seed: int = 0
    workers: int = 32
    tool_weights: tuple[tuple[str, Path], ...] = ()
    near_copies: bool = True
    progress: bool = True

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"evolve: mode {self.mode!r} is not one of {', '.join(MODES)}")
        if not self.generators:
            raise ConfigError("evolve: no generator role (give --generator)")
        if not self.sources:
            raise ConfigError("evolve: no image source (give --images_dir, --crawl, --serper or --flickr)")
        names = [s.name for s in self.sources]
        if len(set(names)) != len(names):
            raise ConfigError(f"evolve: image sources repeat: {names}")


class Update:
    """The state of one update while its stages run: the benchmark, the roles, the cache, the tools,
    the progress bars and the stage clocks; close() when done."""

    def __init__(self, config: EvolveConfig, roles: dict[str, Role] | None = None) -> None:
        self.config = config
        self.space = Workspace(config.out)
        self.space.root.mkdir(parents=True, exist_ok=True)
        self.benchmark: Benchmark = load_benchmark(config.task, config.include_paths, config.layout)
        specs = (*config.roles, *config.generators)
        self.roles = roles or build_roles(specs)
        missing = [r for r in (*ROLES, *(g.role for g in config.generators)) if r not in self.roles]
        if missing:
            raise ConfigError(f"evolve: no model for role(s) {', '.join(missing)}")
        self.generators = [self.roles[g.role] for g in config.generators]
        self.cache = StageCache(self.space.cache_path)
        self.blobs = self.space.blobs
        self.sources = {s.name: s for s in config.sources}
        self.tools: ToolBox = default_tools(dict(config.tool_weights) or None)
        self.progress = StageProgress(STAGES, config.progress)
        # Three pools, one per level of nesting (atomic tasks, their images, the calls of one step): a
        # thread only ever waits on work of the level below, so the pools cannot deadlock.
        self.tasks, self.items, self.calls = (ThreadPoolExecutor(config.workers, thread_name_prefix=f"evolve-{n}")
                                              for n in ("task", "item", "call"))
        self.lock = threading.Lock()
        self.busy: dict[str, list[tuple[float, float]]] = {s: [] for s in CLOCKED}
        self._near: NearCopies | None = None
        self.started = time.monotonic()

    @contextmanager
    def clock(self, stage: str) -> Iterator[None]:
        """Time spent in `stage` (intervals from all threads; the manifest reports their union)."""
        start = time.monotonic()
        try:
            yield
        finally:
            with self.lock:
                self.busy[stage].append((start, time.monotonic()))

    def near_copies(self) -> NearCopies | None:
        """The index of the original benchmark's images that near-copies are checked against (built once)."""
        if not self.config.near_copies:
            return None
        with self.lock:
            if self._near is None:
                rows = [r for a in self.benchmark.atomic_tasks() for r in self.benchmark.questions(a)]
                self._near = NearCopies.from_images((f"{self.benchmark.task} row {r}", self.benchmark.image(r))
                                                    for r in rows)
            return self._near

    def close(self) -> None:
        """Stop the pool and the bars and close the cache."""
        for pool in (self.tasks, self.items, self.calls):
            pool.shutdown(wait=True)
        self.progress.close()
        self.cache.close()


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


# --- the stages' files ------------------------------------------------------------------------------


def _tagged(value: Any) -> dict[str, Any]:
    return {"failure" if isinstance(value, Failure) else "ok": value.record()}


def _untag(data: dict[str, Any], kind: type) -> Any:
    return Failure.from_record(data["failure"]) if "failure" in data else kind.from_record(data["ok"])


def _write_stage(update: Update, stage: str, by_task: dict[str, Any]) -> None:
    write_json_atomic(update.space.stage_path(stage), by_task)


def _read_stage(update: Update, stage: str, before: str) -> dict[str, Any]:
    path = update.space.stage_path(stage)
    if not path.is_file():
        raise ConfigError(f"{path}: not there yet (run `fastmmeval evolve {before} --out {update.space.root}` first)")
    return json.loads(path.read_text(encoding="utf-8"))


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
        _write_stage(u, "acquired", {n: {"acquired": a.record(), "failures": [f.record() for f in fs]}
                                     for (a, fs), n in zip(done, got, strict=True)})
        return got

    return _stage(config, roles, body)


def _acquired(u: Update) -> dict[str, tuple[Acquired, list[Failure]]]:
    data = _read_stage(u, "acquired", "acquire")
    return {n: (Acquired.from_record(v["acquired"]), [Failure.from_record(f) for f in v["failures"]])
            for n, v in data.items()}


def generate(config: EvolveConfig, roles: dict[str, Role] | None = None) -> dict[str, list[Generated | Failure]]:
    """`evolve generate`: an instance per kept image (generated.json)."""

    def body(u: Update) -> dict[str, list[Generated | Failure]]:
        s = _ready(u, "plan")
        acquired = _acquired(u)
        done = _map(u.tasks, lambda a: _generate(u, s, a), [(acquired[n][0],) for n in acquired])
        got = dict(zip(acquired, done, strict=True))
        _write_stage(u, "generated", {n: [_tagged(g) for g in gs] for n, gs in got.items()})
        return got

    return _stage(config, roles, body)


def verify(config: EvolveConfig, roles: dict[str, Role] | None = None) -> dict[str, list[Verified | Failure]]:
    """`evolve verify`: every generated instance run through its plan and the verifier (verified.json)."""

    def body(u: Update) -> dict[str, list[Verified | Failure]]:
        acquired = _acquired(u)
        data = _read_stage(u, "generated", "generate")
        generated = {n: [_untag(g, Generated) for g in gs] for n, gs in data.items()}
        done = _map(u.tasks, lambda n: _verify(u, acquired[n][0], generated[n]), [(n,) for n in generated])
        got = dict(zip(generated, done, strict=True))
        _write_stage(u, "verified", {n: [_tagged(v) for v in vs] for n, vs in got.items()})
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
        _write_stage(u, "acquired", {n: {"acquired": a.record(), "failures": [f.record() for f in fs]}
                                     for n, (a, fs, _, _) in done.items()})
        _write_stage(u, "generated", {n: [_tagged(g) for g in gs] for n, (_, _, gs, _) in done.items()})
        _write_stage(u, "verified", {n: [_tagged(v) for v in vs] for n, (_, _, _, vs) in done.items()})
        return _export(u)

    return _stage(config, roles, body)


# --- export and the manifest --------------------------------------------------------------------------


def _export(u: Update) -> Path:
    from fastmmeval.evolve.dataset import export_version
    from fastmmeval.evolve.review import write_review_sheet

    acquired = _acquired(u)
    data = _read_stage(u, "verified", "verify")
    verified = {n: [_untag(v, Verified) for v in vs] for n, vs in data.items()}
    generated = {n: [_untag(g, Generated) for g in gs]
                 for n, gs in _read_stage(u, "generated", "generate").items()}
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
    manifest = _manifest(u, acquired, generated, verified, skipped)
    out = u.space.dataset_dir(u.config.version)
    folder = export_version(u.benchmark, accepted, u.blobs, out, u.config.version, per_task=u.config.per_task,
                            seed=u.config.seed, manifest=manifest)
    write_review_sheet(folder, u.space.review_path(u.config.version), seed=u.config.seed)
    return folder


def _calls_by_prompt(roles: Iterable[Role]) -> dict[str, dict[str, int]]:
    """Per prompt, over every role: calls made, answered from the cache, failed, and the tokens the
    backends reported."""
    total: dict[str, Counter[str]] = {}
    for role in roles:
        for stage, counts in role.by_stage.items():
            total.setdefault(stage, Counter()).update(counts)
    return {stage: dict(sorted(c.items())) for stage, c in sorted(total.items())}


def _union(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def _manifest(u: Update, acquired: dict[str, tuple[Acquired, list[Failure]]],
              generated: dict[str, list[Generated | Failure]], verified: dict[str, list[Verified | Failure]],
              skipped: list[dict[str, str]]) -> dict[str, Any]:
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
        "calls": _calls_by_prompt(u.roles.values()),
        "usage": [m.usage() for m in models.values()],
        "seconds": {**{s: round(_union(v), 3) for s, v in u.busy.items()},
                    "wall": round(time.monotonic() - u.started, 3)},
    }
