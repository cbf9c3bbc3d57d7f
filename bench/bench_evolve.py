"""One MMBench-Live update end to end, ours against a serial pipeline making the same calls in the order
of the reference repository (PRIS-CV/MMBench-Live, read at its commit 292aa28).

The input: an MMBench dev fixture (tests/evolve_benchmarks.py) with `--tasks` atomic tasks, and a folder
of drawn scenes (tests/evolve_images.py), 1.5 x `--images` per atomic task, each titled "... about
<atomic task>". Every role is played by the scripted server (tests/evolve_llm.py) with three replies made
for this bench: each plan's query is the vague "sign shapes" (it finds the first task's scenes only), the
judge accepts a scene iff its text names the task, and the update role rewrites a query to "<task>
shapes"; so Algorithm 2 (K, tau, M as `--k`, `--tau`, `--m`) rewrites the query of every task but the
first, and the final retrieval (2 x `--images` candidates) holds the task's own scenes and others'. In
front of the server runs the fault proxy (fastmmeval.testing.faults): `--latency` seconds per call and a
quota that answers 429 (Retry-After `--retry_after`) to a call arriving while `--quota` are in flight.

Ours is `fastmmeval.evolve.pipeline.run` as `evolve run` runs it (32 workers per pool, the atomic tasks'
chains overlapping, API roles at their default max_concurrency adapting to the quota). The serial side
calls our stage functions one call at a time (roles at max_concurrency 1, single-thread executors, a
source loading one image at a time), stage after stage, task after task, image after image, in the
reference's order:

1. pipeline/benchmark_summary.py `__main__` (agents/benchmark_summary_agent.py): `paper_analyse`, one
   call for the whole hierarchy and every finest-granularity task; here `write_spec` (one call for the
   benchmark, then one per atomic task).
2. per task `implicit_constraints`: the five perspectives (visual_content, visual_style, ocr_dependency,
   spatial_relation, external_knowledge), then, in pipeline/data_acquisition.py `main`,
   `compress_constraints`; here `find_patterns` (five extractions, then the consolidation, which comes
   before the plan because our plan reads B_t; the reference compresses after planning).
3. per task `crawler_planer` then `keywords_generator` (two calls); here `plan_acquisition` (one).
4. `build_tasks_final_parallel_with_tqdm`: per query `get_content_constraints_keyword` (no counterpart
   here) and `get_correct_search_query` (at most 3 rounds: search, judge the top 10 with `check_image`,
   `regenerate_search_query`); then `process_one_task_aiohttp_best` downloads what the corrected queries
   find, without judging it. Here `controller.control` per query: our Algorithm 2 (tau 0.7 where the
   reference has "more than 0.6", the rewritten query searched next where the reference searches the
   original again), and the final retrieval judged; then the same dedupe as ours.
5. pipeline/qa_generation.py `process_all_tasks_parallel` -> `qa_generation` per image; here
   `generate_item`.
6. The reference's pipeline/ has no verification; agents/qa_validate_agent.py lets an LLM agent call
   vision tools and record wrong pairs, without a vision-blind verifier or its a-hat = a check. The serial
   side runs our `verify_item`, so both sides make the same calls.
7. The reference writes QA JSON per task; both sides export the version (`export_version`) and its review
   sheet.

The reference itself overlaps some calls (10 judgments, 5 queries, 4 tasks x 5 images at a time): the
serial side is its order, not its concurrency. Each round uses fresh workspaces, so every call is made.
`agree`: both sides accepted the same items (image, question, options, answer per atomic task) and wrote
the same dataset bytes. The calls are counted per prompt at the server (`calls_ours`, `calls_peer`,
`calls_equal`): ours may make a few more, because the verifier's prompt holds no image, so two images
with the same question, options and tool outputs make the same call; the serial side finds the second in
the stage cache, ours may send both while neither has been answered.

Prints one JSON line last: {"bench": "evolve", "ours_s", "peer", "peer_s", "ratio", "agree", "calls_ours",
"calls_peer", ...}, the medians over `--rounds` with the spread of the ratio; `floor_s` is the time the
calls take at best under the quota (calls x latency / quota).

Usage: python bench/bench_evolve.py [--tasks 6] [--images 20] [--latency 0.3] [--quota 8] [--retry_after 1]
       [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the fixtures and the model server

from evolve_benchmarks import ABILITIES, save_mmbench_dev  # noqa: E402
from evolve_images import write_folder  # noqa: E402
from evolve_llm import KEY_ENV, EvolveLLM  # noqa: E402

from fastmmeval.evolve import pipeline  # noqa: E402
from fastmmeval.evolve.acquisition import plan_acquisition  # noqa: E402
from fastmmeval.evolve.benchmark import Benchmark, load_benchmark  # noqa: E402
from fastmmeval.evolve.controller import ControllerSettings, control  # noqa: E402
from fastmmeval.evolve.dataset import export_version  # noqa: E402
from fastmmeval.evolve.dedupe import NearCopies, drop_duplicates  # noqa: E402
from fastmmeval.evolve.executors import open_source  # noqa: E402
from fastmmeval.evolve.generate import generate_item  # noqa: E402
from fastmmeval.evolve.patterns import find_patterns  # noqa: E402
from fastmmeval.evolve.pipeline import ROLES, EvolveConfig  # noqa: E402
from fastmmeval.evolve.records import Candidate, Failure, Generated, Judgment, Verified  # noqa: E402
from fastmmeval.evolve.review import write_review_sheet  # noqa: E402
from fastmmeval.evolve.sources import ImageSource  # noqa: E402
from fastmmeval.evolve.spec import AtomicSpec, write_spec  # noqa: E402
from fastmmeval.evolve.toolbox import default_tools  # noqa: E402
from fastmmeval.evolve.tools import ToolBox  # noqa: E402
from fastmmeval.evolve.verify import verify_item  # noqa: E402
from fastmmeval.live.roles import Role, RoleSpec, build_roles  # noqa: E402
from fastmmeval.live.store import Blobs, StageCache  # noqa: E402
from fastmmeval.tasks.sources import DATA_DIR_ENV  # noqa: E402
from fastmmeval.testing.faults import start_proxy  # noqa: E402

TASK = "mmbench_en_dev"
QUESTIONS = 6  # per atomic task of the fixture
NOW = "2026-12-31T00:00:00Z"  # where the sources' recency window ends: the same candidates on any day
QUERY = "sign shapes"  # every plan's query: it ranks the scenes in folder order, the first task's first
Items = dict[str, list[tuple[str, str, tuple[str, ...], str]]]


def _quoted(pattern: str, text: str) -> str:
    found = re.search(pattern, text)
    return found.group(1) if found else ""


def plan_reply(text: str) -> str:
    """The planner: the folder, and the vague QUERY."""
    return json.dumps({"fields": ["title", "context"], "strategy": {"source": "folder", "why": "it holds the images"},
                       "queries": [QUERY]})


def judge_reply(text: str) -> str:
    """The judge: accept a scene iff its text says it is about the atomic task judged for."""
    atomic = _quoted(r'the atomic task "([^"]+)"', text)
    accept = f"about {atomic}" in _quoted(r"(?s)The image's text:\n(.+?)\n\n", text)
    return json.dumps({"accept": accept, "rationales": [f"it shows {atomic.replace('_', ' ')}" if accept
                                                        else f"it is not about {atomic.replace('_', ' ')}"]})


def update_reply(text: str) -> str:
    """The update role: a query naming the task."""
    atomic = _quoted(r'The atomic task "([^"]+)"', text)
    return json.dumps({"query": f"{atomic} shapes"})


def write_images(root: Path, names: list[str], own: int) -> None:
    """`own` drawn scenes per atomic task in `names`, in that order, each titled "... about <task>"."""
    write_folder(root, own * len(names))
    manifest = root / "manifest.jsonl"
    lines = [json.loads(line) for line in manifest.read_text(encoding="utf-8").splitlines()]
    for i, line in enumerate(lines):
        line["title"] += f" about {names[i // own]}"
    manifest.write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines), encoding="utf-8")


def specs(llm: EvolveLLM, url: str, **args: str) -> tuple[tuple[RoleSpec, ...], tuple[RoleSpec, ...]]:
    """Every role and one generator played by the server behind the proxy at `url` (retries on, like a
    real run)."""
    roles = tuple(RoleSpec(r, "openai", llm.role_args(url, max_retries="8", **args)) for r in ROLES)
    generator = RoleSpec("generator1", "openai", llm.role_args(url, model="scripted-1", max_retries="8", **args))
    return roles, (generator,)


def accepted_items(verified: dict[str, list[Verified | Failure]]) -> Items:
    """Per atomic task, the accepted items as (image sha, question, options, answer)."""
    return {name: [(v.generated["sha"], v.generated["question"], tuple(v.generated["options"]), v.generated["answer"])
                   for v in vs if isinstance(v, Verified) and v.accepted] for name, vs in sorted(verified.items())}


def ours(config: EvolveConfig) -> tuple[float, Items, Path]:
    """`evolve run`: seconds, the accepted items and the version's folder."""
    start = time.perf_counter()
    folder = pipeline.run(config)
    seconds = time.perf_counter() - start
    data = json.loads(pipeline.Workspace(config.out).stage_path("verified").read_text(encoding="utf-8"))
    verified = {n: [Verified.from_record(v["ok"]) if "ok" in v else Failure.from_record(v["failure"]) for v in vs]
                for n, vs in data.items()}
    return seconds, accepted_items(verified), folder


def _ok(value: Any) -> Any:
    if isinstance(value, Failure):
        raise RuntimeError(f"serial: {value.stage} of {value.subject} failed: {value.reason}")
    return value


def _acquired(atomic: AtomicSpec, source: ImageSource, roles: dict[str, Role], blobs: Blobs, cache: StageCache,
              one: ThreadPoolExecutor, config: EvolveConfig, near: NearCopies) -> list[Candidate]:
    """The controller for each of the plan's queries, then what ours keeps: the accepted candidates
    (each once, in order), without duplicates and near-copies, at most `config.images`."""
    assert atomic.plan is not None
    judged: dict[str, tuple[Candidate, bool]] = {}
    for q0 in atomic.plan.queries:
        done = control(q0, atomic, source, roles["judge"], roles["writer"], blobs, cache, one, config.controller)
        for candidate, judgment in done.judged:
            judged.setdefault(candidate.sha, (candidate, isinstance(judgment, Judgment) and judgment.accept))
    kept, _ = drop_duplicates([c for c, ok in judged.values() if ok], blobs, near)
    return kept[: config.images]


def _export(benchmark: Benchmark, kept: dict[str, list[Candidate]], verified: dict[str, list[Verified | Failure]],
            blobs: Blobs, out: Path, config: EvolveConfig) -> Path:
    """The version and its review sheet from the accepted items (an image in two tasks kept by the first
    by name, as ours does)."""
    candidates = {c.sha: c for cs in kept.values() for c in cs}
    pairs, seen = [], set()
    for name in sorted(verified):
        for v in verified[name]:
            sha = v.generated["sha"] if isinstance(v, Verified) and v.accepted else None
            if sha is not None and sha not in seen:
                seen.add(sha)
                pairs.append((v, candidates[sha]))
    folder = export_version(benchmark, pairs, blobs, out / f"v{config.version}", config.version,
                            per_task=config.per_task, seed=config.seed, manifest={"task": TASK, "by": "serial"})
    write_review_sheet(folder, out / f"review_v{config.version}.html", seed=config.seed)
    return folder


def serial(config: EvolveConfig, roles: dict[str, Role], source: ImageSource, out: Path) -> tuple[float, Items, Path]:
    """The same stages in the reference's order, one call at a time: seconds, accepted items, the version."""
    cache, blobs = StageCache(out / "work" / "cache.sqlite"), Blobs(out / "work" / "blobs")
    tools: ToolBox = default_tools()
    start = time.perf_counter()
    with ThreadPoolExecutor(1) as one:
        benchmark = load_benchmark(TASK)
        spec = write_spec(benchmark, roles["writer"], blobs, cache, seed=config.seed, threads=1)
        atomic = spec.atomic
        for a in atomic.values():
            a.patterns = _ok(find_patterns(benchmark, a, roles["analyst"], roles["writer"], blobs, cache, one,
                                           ratio=config.ratio, seed=config.seed))
        for a in atomic.values():
            a.plan = _ok(plan_acquisition(spec.task, a, roles["writer"], blobs, cache, [source.name], config.queries))
        near = NearCopies.from_images((f"{TASK} row {r}", benchmark.image(r))
                                      for name in benchmark.atomic_tasks() for r in benchmark.questions(name))
        kept = {name: _acquired(a, source, roles, blobs, cache, one, config, near) for name, a in atomic.items()}
        generated = {name: [generate_item(spec.task, atomic[name], c, [roles["generator1"]], roles["comparer"], tools,
                                          blobs, cache, one, index=i, mode=config.mode, seed=config.seed)
                            for i, c in enumerate(cs)] for name, cs in kept.items()}
        suffix = {c.sha: c.suffix for cs in kept.values() for c in cs}
        verified = {name: [verify_item(g, suffix[g.sha], roles["verifier"], tools, blobs, cache)
                           for g in gs if isinstance(g, Generated)] for name, gs in generated.items()}
        folder = _export(benchmark, kept, verified, blobs, out, config)
    seconds = time.perf_counter() - start
    cache.close()
    return seconds, accepted_items(verified), folder


def same_dataset(a: Path, b: Path) -> bool:
    """Whether two versions hold the same parquet bytes."""
    files = sorted(p.name for p in a.glob("*.parquet"))
    return bool(files) and files == sorted(p.name for p in b.glob("*.parquet")) and all(
        (a / f).read_bytes() == (b / f).read_bytes() for f in files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=6, help=f"atomic tasks (at most {len(ABILITIES)})")
    parser.add_argument("--images", type=int, default=20, help="accepted images per atomic task")
    parser.add_argument("--latency", type=float, default=0.3, help="seconds the proxy adds to every call")
    parser.add_argument("--quota", type=int, default=8, help="calls in flight above which the proxy answers 429")
    parser.add_argument("--retry_after", type=float, default=1.0, help="the 429s' Retry-After")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--tau", type=float, default=0.7)
    parser.add_argument("--m", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not 1 <= args.tasks <= len(ABILITIES) or min(args.images, args.rounds, args.k, args.m) < 1:
        parser.error(f"--tasks must lie in 1..{len(ABILITIES)}; --images, --rounds, --k and --m must be positive")
    os.environ.setdefault(KEY_ENV, "bench-key")
    names = list(ABILITIES)[: args.tasks]
    settings = ControllerSettings(args.k, args.tau, args.m, retrieve=2 * args.images)
    answers = {"acquisition_plan": plan_reply, "judge": judge_reply, "update_query": update_reply}
    rounds = []
    with (
        tempfile.TemporaryDirectory(prefix="bench_evolve_") as tmp,
        EvolveLLM(answers) as llm,
        start_proxy(llm.url, latency_s=args.latency, max_concurrency=args.quota, retry_after=args.retry_after) as proxy,
    ):
        root = Path(tmp)
        os.environ[DATA_DIR_ENV] = str(root / "data")
        save_mmbench_dev(root / "data", dict.fromkeys(names, QUESTIONS))
        write_images(root / "images", names, math.ceil(1.5 * args.images))  # slack for drawn pHash duplicates
        for r in range(args.rounds):
            out = root / f"round{r}"
            roles, generators = specs(llm, proxy.url)
            config = EvolveConfig(TASK, out / "ours", roles, generators,
                                  (open_source("folder", root=root / "images", now=NOW),), controller=settings,
                                  images=args.images, progress=False)
            before, refused = llm.counts(), proxy.stats.faults["429_limit"]
            ours_s, ours_items, ours_folder = ours(config)
            calls_ours, refused = llm.counts() - before, proxy.stats.faults["429_limit"] - refused
            roles, generators = specs(llm, proxy.url, max_concurrency="1")
            before = llm.counts()
            peer_s, peer_items, peer_folder = serial(config, build_roles((*roles, *generators)),
                                                     open_source("folder", root=root / "images", now=NOW, workers=1),
                                                     out / "serial")
            calls_peer = llm.counts() - before
            items = sum(map(len, ours_items.values()))
            agree = ours_items == peer_items and items > 0 and same_dataset(ours_folder, peer_folder)
            if calls_ours != calls_peer:
                print(f"calls per prompt differ: ours {dict(calls_ours)}, serial {dict(calls_peer)}", file=sys.stderr)
            manifest = json.loads((ours_folder / "manifest.json").read_text(encoding="utf-8"))
            rounds.append({"ours_s": ours_s, "peer_s": peer_s, "calls_ours": calls_ours.total(),
                           "calls_peer": calls_peer.total(), "items": items, "refused": refused, "agree": agree,
                           "calls_equal": calls_ours == calls_peer})
            print(f"round {r + 1}: ours {ours_s:.2f} s, serial {peer_s:.2f} s ({peer_s / ours_s:.1f}x), calls "
                  f"{calls_ours.total()}/{calls_peer.total()}, {items} items, {refused} refused (429), "
                  f"agree={agree}; ours' stages (s): {manifest['seconds']}", file=sys.stderr)
    ours_s = statistics.median(r["ours_s"] for r in rounds)
    peer_s = statistics.median(r["peer_s"] for r in rounds)
    ratios = [r["peer_s"] / r["ours_s"] for r in rounds]
    calls = rounds[0]["calls_peer"]  # the same every round: one call at a time, so no duplicate in flight
    print(json.dumps({
        "bench": "evolve", "ours_s": round(ours_s, 3), "peer": "serial pipeline in PRIS-CV/MMBench-Live's order",
        "peer_s": round(peer_s, 3), "ratio": round(peer_s / ours_s, 2), "ratio_min": round(min(ratios), 2),
        "ratio_max": round(max(ratios), 2), "agree": all(r["agree"] for r in rounds),
        "calls_ours": statistics.median(r["calls_ours"] for r in rounds), "calls_peer": calls,
        "calls_equal": all(r["calls_equal"] for r in rounds), "items": rounds[0]["items"],
        "refused_429": statistics.median(r["refused"] for r in rounds),
        "floor_s": round(calls * args.latency / args.quota, 3), "tasks": args.tasks, "images": args.images,
        "k": args.k, "tau": args.tau, "m": args.m, "latency_s": args.latency, "quota": args.quota,
        "rounds": len(rounds),
    }))


if __name__ == "__main__":
    main()
