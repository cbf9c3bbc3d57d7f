"""`live build`: capture every source, then, page by page and item by item as soon as each input is
ready, extract -> generate -> check -> finalize -> score, and select the month's items. Pages and items
run concurrently (a thread per call in flight; API backends share one adaptive concurrency limit), every
result goes through the stage cache, and the build's record (captures, items, failures, selection,
manifest) is written atomically to `<out>/build.json`: a rerun after kill -9 makes no repeated call and
writes the same record."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from fastmmeval.errors import ConfigError
from fastmmeval.live.capture import CaptureSettings, capture_pages
from fastmmeval.live.check import check_draft
from fastmmeval.live.extract import extract_page
from fastmmeval.live.finalize import finalize_draft
from fastmmeval.live.generate import generate_drafts
from fastmmeval.live.progress import StageProgress
from fastmmeval.live.prompts import PROMPT_NAMES, prompt
from fastmmeval.live.records import Capture, Draft, Failure, Item, PageInfo, Source, check_month
from fastmmeval.live.roles import ROLE_NAMES, Role, RoleSpec, build_roles
from fastmmeval.live.score import score_item
from fastmmeval.live.select import Selection, select_items
from fastmmeval.live.store import StageCache, WorkFolder, content_key
from fastmmeval.util import write_bytes_atomic, write_json_atomic

STAGES = ("capture", "extract", "generate", "check", "finalize", "score")
@dataclass(frozen=True)
class Workspace(WorkFolder):
    """A month's build folder: `work/` (stage cache; blobs: screenshots, page texts and HTML),
    `build.json`, `review.html`, `dataset/`."""

    @property
    def build_path(self) -> Path:
        """The build's record."""
        return self.root / "build.json"

    @property
    def review_path(self) -> Path:
        """The review page."""
        return self.root / "review.html"

    @property
    def dataset_dir(self) -> Path:
        """Where `live export` writes the month's dataset and task file."""
        return self.root / "dataset"


@dataclass(frozen=True)
class BuildConfig:
    """What `live build` makes: a month from `sources`, with one RoleSpec per role (extractor,
    generator, checker, finalizer, scorer), kept at `threshold` (0-10) and up to `size` items;
    `earlier` are earlier months' build folders or datasets (near-duplicates against their questions
    are removed; a page whose screenshots have not changed since is not asked about again); `allow` is
    the capture allowlist (default: the sources' hosts)."""

    month: str
    out: Path
    sources: tuple[Source, ...]
    roles: tuple[RoleSpec, ...]
    capture: CaptureSettings = field(default_factory=CaptureSettings)
    threshold: float = 6.0
    size: int = 300
    seed: int = 0
    workers: int = 32
    earlier: tuple[Path, ...] = ()
    contam_index: Path | None = None
    allow: frozenset[str] | None = None
    progress: bool = True


@dataclass
class Build:
    """A built month: every capture, every finished item, every failure, the selection, the manifest."""

    month: str
    captures: list[Capture]
    items: list[Item]
    failures: list[Failure]
    selection: Selection
    manifest: dict[str, Any]

    def record(self) -> dict[str, Any]:
        """The JSON form written to build.json."""
        return {
            "month": self.month,
            "captures": [c.record() for c in self.captures],
            "items": [i.record() for i in self.items],
            "failures": [f.record() for f in self.failures],
            "selection": self.selection.record(),
            "manifest": self.manifest,
        }

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> Build:
        """Back from `record()`."""
        return cls(
            data["month"],
            [Capture.from_record(c) for c in data["captures"]],
            [Item.from_record(i) for i in data["items"]],
            [Failure.from_record(f) for f in data["failures"]],
            Selection.from_record(data["selection"]),
            data["manifest"],
        )


def load_build(root: Path) -> Build:
    """The build recorded in `root/build.json` (a ConfigError naming the file if there is none)."""
    path = Workspace(root).build_path
    if not path.is_file():
        raise ConfigError(f"{path}: no build here (run `fastmmeval live build --out {root}` first)")
    return Build.from_record(json.loads(path.read_text(encoding="utf-8")))


def build(config: BuildConfig, roles: dict[str, Role] | None = None) -> Build:
    """Build the month `config` describes (see the module docstring); `roles` may be given ready-made
    (tests), else they are built from `config.roles`."""
    check_month(config.month)
    started = time.monotonic()
    space = Workspace(config.out)
    roles = roles or build_roles(config.roles)
    missing = [r for r in ROLE_NAMES if r not in roles]
    if missing:
        raise ConfigError(f"live build: no model for role(s) {', '.join(missing)}")
    cache, blobs = StageCache(space.cache_path), space.blobs
    earlier = _Earlier.read(config.earlier)
    stages = StageProgress(STAGES, config.progress)
    items: dict[tuple[int, int], Item] = {}
    failures: dict[tuple[int, int], Failure] = {}
    lock = threading.Lock()
    futures: list[Future[None]] = []

    def item_chain(order: tuple[int, int], draft: Draft, capture: Capture, info: PageInfo) -> None:
        result: Any = draft
        for stage, step in (
            ("check", lambda d: check_draft(d, capture, info, roles["checker"], cache, blobs)),
            ("finalize", lambda d: finalize_draft(d, capture, roles["finalizer"], cache, blobs)),
        ):
            stages.expect(stage)
            result = step(result)
            stages.done(stage, not isinstance(result, Failure))
            if isinstance(result, Failure):
                with lock:
                    failures[order] = result
                return
        stages.expect("score")
        score = score_item(result, capture, roles["scorer"], cache, blobs)
        stages.done("score", not isinstance(score, Failure))
        with lock:
            if isinstance(score, Failure):
                failures[order] = score
            else:
                items[order] = Item(result.record(), score.record(), capture.record(), roles["generator"].name,
                                    roles["checker"].name, roles["finalizer"].name, roles["scorer"].name)

    def page_chain(page: int, capture: Capture) -> None:
        stages.expect("extract")
        info = extract_page(capture, roles["extractor"], cache, blobs)
        stages.done("extract", not isinstance(info, Failure))
        if isinstance(info, Failure):
            with lock:
                failures[(page, -1)] = info
            return
        stages.expect("generate")
        drafts = generate_drafts(capture, info, roles["generator"], cache, blobs)
        stages.done("generate", not isinstance(drafts, Failure))
        if isinstance(drafts, Failure):
            with lock:
                failures[(page, -1)] = drafts
            return
        with lock:
            for index, draft in enumerate(drafts):
                if isinstance(draft, Failure):
                    failures[(page, index)] = draft
                else:
                    futures.append(pool.submit(item_chain, (page, index), draft, capture, info))

    with ThreadPoolExecutor(config.workers, thread_name_prefix="live") as pool:
        try:
            stages.expect("capture", len(config.sources))

            def captured(page: int, capture: Capture) -> None:  # a page's chain starts as soon as it is captured
                stages.done("capture", capture.error is None)
                if capture.error is not None:
                    with lock:
                        failures[(page, -1)] = Failure("capture", capture.url, capture.error)
                elif not capture.unchanged:
                    with lock:
                        futures.append(pool.submit(page_chain, page, capture))

            captures = capture_pages(list(config.sources), config.capture, blobs, cache, config.month,
                                     previous=earlier.captures, allow=config.allow, done=captured)
            capture_s = time.monotonic() - started
            while True:  # page chains add item chains while they run
                with lock:
                    pending = [f for f in futures if not f.done()]
                if not pending:
                    break
                wait(pending)
            for f in futures:
                f.result()  # a bug in a stage surfaces here, not as a missing item
        finally:
            stages.close()
            cache.close()  # every stage result is in; a failed build's cache is closed too
    ordered_items = [items[k] for k in sorted(items)]
    ordered_failures = [failures[k] for k in sorted(failures)]
    selection = select_items(ordered_items, config.threshold, config.size, config.seed, earlier.questions,
                             config.contam_index)
    manifest = _manifest(config, roles, stages, captures, selection, capture_s, time.monotonic() - started)
    result = Build(config.month, captures, ordered_items, ordered_failures, selection, manifest)
    write_json_atomic(space.build_path, result.record())
    return result


def _manifest(config: BuildConfig, roles: dict[str, Role], stages: StageProgress, captures: Sequence[Capture],
              selection: Selection, capture_s: float, wall_s: float) -> dict[str, Any]:
    counts = {s: dict(c) for s, c in stages.counts.items()}
    counts["capture"] = {"in": len(captures), "out": sum(c.error is None for c in captures),
                         "failed": sum(c.error is not None for c in captures),
                         "unchanged": sum(c.unchanged for c in captures)}
    models: dict[str, Any] = {}
    for role in roles.values():
        models.setdefault(content_key(role.spec.model, role.spec.args), role.model)
    return {
        "month": config.month,
        "sources": [s.record() for s in config.sources],
        "capture": asdict(config.capture),
        "stages": counts,
        "roles": {name: {"model": r.spec.model, "name": r.name, "args": r.spec.args, "fingerprint": r.fingerprint(),
                         "calls": dict(r.counts)} for name, r in roles.items()},
        "prompts": {prompt(n).id: prompt(n).sha256 for n in PROMPT_NAMES},
        "usage": [m.usage() for m in models.values()],
        "selection": {"threshold": config.threshold, "size": config.size, "seed": config.seed,
                      "kept": len(selection.kept)},
        "seconds": {"capture": round(capture_s, 3), "wall": round(wall_s, 3)},
    }


@dataclass
class _Earlier:
    """What earlier months contribute: their questions (near-duplicates) and each source's last capture."""

    questions: list[str]
    captures: dict[str, Capture]

    @classmethod
    def read(cls, paths: Sequence[Path]) -> _Earlier:
        questions: list[str] = []
        captures: dict[str, Capture] = {}
        for path in paths:
            if Workspace(path).build_path.is_file():
                earlier = load_build(path)
                kept = set(earlier.selection.kept)
                questions += [Draft.from_record(i.draft).question for i in earlier.items if i.id in kept]
                for capture in earlier.captures:  # the latest good capture of each url
                    if capture.error is None and capture.captured_at >= captures.get(capture.url, capture).captured_at:
                        captures[capture.url] = capture
            else:
                from fastmmeval.live.dataset import load_month

                questions += [str(q) for q in load_month(path)["question"]]
        return cls(questions, captures)



def capture_sources(month: str, out: Path, sources: Sequence[Source], settings: CaptureSettings,
                    earlier: Sequence[Path] = (), allow: frozenset[str] | None = None,
                    progress: bool = True) -> list[Capture]:
    """`live capture`: the capture stage alone (cached like in a build, so a later build reuses it);
    the captures are also written to `<out>/captures.json`. `allow` is the allowlist (default: the
    sources' hosts)."""
    check_month(month)
    space = Workspace(out)
    previous = _Earlier.read(earlier).captures
    cache = StageCache(space.cache_path)
    try:
        with tqdm(total=len(sources), desc="capture", unit="page", disable=not progress) as bar:
            captures = capture_pages(list(sources), settings, space.blobs, cache, month, previous=previous,
                                     allow=allow, done=lambda i, capture: bar.update(1))
    finally:
        cache.close()
    write_json_atomic(out / "captures.json", [c.record() for c in captures])
    return captures


def review(out: Path) -> Path:
    """`live review`: write the review page of the build in `out` (accept/reject each item; its
    decisions file is what `export` honours)."""
    from fastmmeval.live.review import review_page

    built = load_build(out)
    space = Workspace(out)
    return review_page(built.items, space.blobs, space.review_path, built.selection)


def export(out: Path, decisions: Path | None = None) -> Path:
    """`live export`: the build in `out` as the month's dataset (parquet, save_to_disk copy, manifest)
    and its task file `live_bench_<YYYY_MM>.yaml`, in `<out>/dataset/`; `decisions` is a review page's
    decisions file. Returns the task file."""
    from fastmmeval.live.dataset import export_month
    from fastmmeval.live.month_task import month_task_file
    from fastmmeval.live.review import read_decisions

    built = load_build(out)
    space = Workspace(out)
    chosen = read_decisions(decisions) if decisions is not None else None
    folder = export_month(built.items, space.blobs, built.month, space.dataset_dir, built.manifest, chosen,
                          selection=built.selection)
    task = folder / f"live_bench_{built.month.replace('-', '_')}.yaml"
    write_bytes_atomic(task, month_task_file(built.month, folder).encode("utf-8"))
    return task
