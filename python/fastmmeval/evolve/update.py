"""What one update is: its settings (EvolveConfig) and, while its stages run, its state (Update: the
benchmark, the roles, the cache, the tools, the pools, the progress bars and the stage clocks)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fastmmeval.errors import ConfigError
from fastmmeval.evolve.benchmark import Benchmark, Layout, load_benchmark
from fastmmeval.evolve.controller import ControllerSettings
from fastmmeval.evolve.dedupe import NearCopies
from fastmmeval.evolve.generate import MODES
from fastmmeval.evolve.sources import ImageSource
from fastmmeval.evolve.toolbox import default_tools
from fastmmeval.evolve.tools import ToolBox
from fastmmeval.evolve.workspace import Workspace
from fastmmeval.live.progress import StageProgress
from fastmmeval.live.roles import Role, RoleSpec, build_roles
from fastmmeval.live.store import StageCache

STAGES = ("spec", "patterns", "plan", "judge", "generate", "verify")  # the progress bars
CLOCKED = ("spec", "patterns", "plan", "acquire", "generate", "verify")  # the manifest's seconds (judge: in acquire)
# The roles: the writer (an LLM) writes the spec, consolidates patterns, plans acquisition and rewrites
# queries; the analyst (a VLM) extracts patterns; the judge (a VLM) is the controller's J; generators
# (VLMs) write instances; the comparer picks among them; the verifier reads only text.
ROLES = ("writer", "analyst", "judge", "comparer", "verifier")
PROMPTS = ("spec_benchmark", "spec_atomic", "pattern_extract", "pattern_consolidate", "acquisition_plan", "judge",
           "update_query", "generate", "compare", "verify")  # fmt: skip

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
