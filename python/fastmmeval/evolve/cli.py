"""`fastmmeval evolve spec|patterns|plan|acquire|generate|verify|export|run`: a new version of a
multiple-choice benchmark from fresh images (MMBench-Live); each subcommand is one stage of the API
(fastmmeval.evolve.pipeline), `run` chains them."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.table import Table

from fastmmeval.argtypes import float_range, positive_int, seed_int
from fastmmeval.console import print_table, stdout_console
from fastmmeval.tasks.sources import data_dir_flag, use_data_dir

ROLE_HELP = {
    "writer": "writes the spec, consolidates patterns, plans acquisition and rewrites queries (an LLM)",
    "analyst": "extracts visual patterns from the benchmark's images (a VLM; default: the writer's model)",
    "judge": "accepts or rejects candidate images (a VLM; default: the writer's model)",
    "comparer": "picks the best of several generators' instances (default: the writer's model)",
    "verifier": "answers from the tools' text alone, vision-blind (an LLM; default: the writer's model)",
}
STAGE_FILES = {"acquire": "acquired", "generate": "generated", "verify": "verified"}
STAGE_HELP = {
    "spec": "write spec.yaml: purpose, format, hierarchy, atomic tasks (an editable file later stages read)",
    "patterns": "Algorithm 1: task-related visual patterns per atomic task, into spec.yaml",
    "plan": "the acquisition plan (fields, strategy, queries) per atomic task, into spec.yaml",
    "acquire": "Algorithm 2: feedback-controlled retrieval, judged, deduplicated (acquired.json)",
    "generate": "question, options, answer and a declarative solution plan per image (generated.json)",
    "verify": "run each plan with the tools; a vision-blind verifier must agree (verified.json)",
    "export": "write <task>_live_v<N>: dataset, task file, manifest, review sheet",
    "run": "every stage above, the atomic tasks' chains overlapping",
}


def add_parser(sub: Any) -> None:
    """Add `evolve` with one subcommand per stage and `run`."""
    evolve = sub.add_parser("evolve", help="MMBench-Live: a new version of a benchmark from fresh images")
    cmds = evolve.add_subparsers(dest="evolve_command", required=True)
    for stage, text in STAGE_HELP.items():
        _flags(cmds.add_parser(stage, help=text), stage)
    r = cmds.add_parser("review", help="a new review sheet of an exported version (another seed: another sample), "
                                       "or the correctness rate of a saved review")
    r.add_argument("--out", type=Path, required=True, help="the update's folder")
    r.add_argument("--version", type=positive_int, default=1, help="N of <task>_live_v<N>")
    r.add_argument("--seed", type=seed_int, default=0, help="which sample of each atomic task")
    r.add_argument("--fraction", type=float_range(0.0, 1.0, low_open=True), default=0.1,
                   help="share of each atomic task's questions on the sheet (at least one)")
    r.add_argument("--decisions", type=Path, default=None, help="a saved review file: print its correctness rates")


def _flags(p: argparse.ArgumentParser, stage: str) -> None:
    p.add_argument("--tasks", required=True, help="the benchmark to evolve (a multiple-choice task: mmbench_en_dev)")
    p.add_argument("--out", type=Path, required=True, help="the update's folder (spec.yaml, stage files, cache, v<N>/)")
    p.add_argument("--include_path", action="append", default=[], type=Path, help="extra folder of task YAML files")
    data_dir_flag(p)
    p.add_argument("--atomic", action="append", default=None, help="only this atomic task (repeatable)")
    p.add_argument("--atomic_field", default=None, help="the rows' field naming the atomic task (default: MMBench's)")
    p.add_argument("--ability_field", default=None, help="the rows' field naming the L-2 ability")
    for role, text in ROLE_HELP.items():
        p.add_argument(f"--{role}", required=role == "writer", default=None, help=f"backend that {text}")
        p.add_argument(f"--{role}_args", default="", help=f"--model_args of the {role}'s backend")
    p.add_argument("--generator", action="append", default=[],
                   help="a backend that writes instances (a VLM; repeatable; default: the writer's model)")
    p.add_argument("--generator_args", action="append", default=[],
                   help="--model_args of each --generator, in the same order")
    p.add_argument("--mode", default="round-robin", choices=["round-robin", "all"],
                   help="generators take turns per image, or all answer and the comparer picks")
    p.add_argument("--max_new_tokens", type=positive_int, default=2048, help="per role call")
    p.add_argument("--images_dir", type=Path, default=None,
                   help="a local folder of images or with a manifest.jsonl (the offline source)")
    p.add_argument("--crawl", action="append", default=[], help="a site URL to crawl for images (repeatable)")
    p.add_argument("--allow_host", action="append", default=[], help="a host the crawl may also load from")
    p.add_argument("--serper", action="store_true", help="keyword image search through Serper ($SERPER_API_KEY)")
    p.add_argument("--serper_url", default=None, help="Serper's base URL (a stand-in or proxy)")
    p.add_argument("--flickr", action="store_true", help="recent uploads through Flickr ($FLICKR_API_KEY)")
    p.add_argument("--flickr_url", default=None, help="Flickr's REST URL (a stand-in or proxy)")
    p.add_argument("--window_days", type=positive_int, default=365, help="recency window of searched images")
    p.add_argument("--paper", type=Path, default=None, help="a text file of the benchmark's paper for the spec")
    p.add_argument("--ratio", type=float_range(0.0, 1.0, low_open=True), default=0.1,
                   help="rho: the share of each atomic task's instances the pattern analyst sees")
    p.add_argument("--queries", type=positive_int, default=2, help="queries per acquisition plan")
    p.add_argument("--k", type=positive_int, default=10, help="K: candidates judged per controller round")
    p.add_argument("--tau", type=float_range(0.0, 1.0), default=0.7, help="tau: acceptance rate that keeps a query")
    p.add_argument("--m", type=positive_int, default=3, help="M: controller rounds at most")
    p.add_argument("--retrieve", type=positive_int, default=40, help="candidates retrieved with the final query")
    p.add_argument("--images", type=positive_int, default=20, help="accepted images per atomic task generated from")
    p.add_argument("--version", type=positive_int, default=1, help="N of <task>_live_v<N>")
    p.add_argument("--per_task", type=positive_int, default=None,
                   help="questions per atomic task (default: the original's proportions)")
    p.add_argument("--tool_weights", action="append", default=[],
                   help="TOOL=DIR: local weights for a model tool (detect, depth); repeatable")
    p.add_argument("--no_near_copies", action="store_true",
                   help="skip the check against the original benchmark's images")
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--workers", type=positive_int, default=32, help="calls in flight at most per level")
    p.add_argument("--no_progress", action="store_true", help="hide progress bars")
    if stage == "spec":
        p.add_argument("--force", action="store_true", help="rewrite spec.yaml even if it exists")


def _config(args: argparse.Namespace) -> Any:
    from fastmmeval.errors import ConfigError
    from fastmmeval.evolve.benchmark import Layout
    from fastmmeval.evolve.controller import ControllerSettings
    from fastmmeval.evolve.executors import open_source
    from fastmmeval.evolve.pipeline import EvolveConfig
    from fastmmeval.live.roles import RoleSpec
    from fastmmeval.models.base import parse_model_args

    def spec(role: str) -> RoleSpec:
        model, raw = getattr(args, role), getattr(args, f"{role}_args")
        if model is None:
            model, raw = args.writer, raw or args.writer_args
        return RoleSpec(role, model, parse_model_args(raw), max_new_tokens=args.max_new_tokens)

    if len(args.generator_args) > len(args.generator):
        raise ConfigError("evolve: more --generator_args than --generator")
    if args.generator:
        named = list(zip(args.generator, args.generator_args + [""] * (len(args.generator) - len(args.generator_args)),
                         strict=True))
    else:
        named = [(args.writer, args.writer_args)]
    generators = tuple(RoleSpec(f"generator{i + 1}", m, parse_model_args(raw), max_new_tokens=args.max_new_tokens)
                       for i, (m, raw) in enumerate(named))
    sources = []
    if args.images_dir is not None:
        sources.append(open_source("folder", root=args.images_dir))
    if args.crawl:
        sources.append(open_source("crawl", sites=args.crawl, allow_hosts=args.allow_host))
    if args.serper:
        sources.append(open_source("serper", window_days=args.window_days,
                                   **({"base_url": args.serper_url} if args.serper_url else {})))
    if args.flickr:
        sources.append(open_source("flickr", window_days=args.window_days,
                                   **({"base_url": args.flickr_url} if args.flickr_url else {})))
    weights = []
    for item in args.tool_weights:
        name, sep, folder = item.partition("=")
        if not sep or not name or not folder:
            raise ConfigError(f"--tool_weights {item!r}: expected TOOL=DIR")
        weights.append((name, Path(folder)))
    layout = None
    if args.atomic_field or args.ability_field:
        layout = Layout(atomic=args.atomic_field or "category", ability=args.ability_field)
    use_data_dir(args.data_dir)
    return EvolveConfig(
        args.tasks, args.out, tuple(spec(r) for r in ROLE_HELP), generators, tuple(sources),
        tuple(args.include_path), layout, tuple(args.atomic) if args.atomic else None, args.paper, args.ratio,
        args.queries, ControllerSettings(args.k, args.tau, args.m, args.retrieve), args.images, args.mode,
        args.version, args.per_task, args.seed, args.workers, tuple(weights), not args.no_near_copies,
        progress=not args.no_progress)


def main(args: argparse.Namespace) -> int:
    """Run the `evolve` stage chosen on the command line."""
    from fastmmeval.evolve import pipeline
    from fastmmeval.evolve.workspace import Workspace

    command = args.evolve_command
    console = stdout_console()
    if command == "review":
        return _review(args, console)
    config = _config(args)
    if command == "spec":
        spec = pipeline.spec(config, force=args.force)
        console.print(f"{len(spec.atomic)} atomic tasks under {len(spec.hierarchy)} abilities in "
                      f"{Workspace(config.out).spec_path} (edit it, then: fastmmeval evolve patterns ...)",
                      soft_wrap=True)
        return 0
    if command in ("patterns", "plan"):
        spec = getattr(pipeline, command)(config)
        console.print(f"{command} of {len(spec.atomic)} atomic tasks in {Workspace(config.out).spec_path}",
                      soft_wrap=True)
        return 0
    if command in STAGE_FILES:
        got = getattr(pipeline, command)(config)
        n = sum(len(v.kept) if command == "acquire" else len(v) for v in got.values())
        path = Workspace(config.out).stage_path(STAGE_FILES[command])
        console.print(f"{command}: {n} records for {len(got)} atomic tasks in {path}", soft_wrap=True)
        return 0
    folder = pipeline.run(config) if command == "run" else pipeline.export(config)
    _print_summary(folder, console)
    return 0


def _print_summary(folder: Path, console: Any) -> None:
    import json

    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    table = Table(title=f"evolve {manifest['task']} -> v{manifest['version']}")
    for col in ("Atomic task", "Kept images", "Generated", "Verified", "Accepted", "Exported"):
        table.add_column(col, justify="left" if col == "Atomic task" else "right")
    exported = {name: t["exported"] for name, t in manifest["export"]["by_task"].items()}
    for name, t in manifest["atomic"].items():
        table.add_row(name, str(t["acquire"]["kept"]), str(t["generate"]["out"]), str(t["verify"]["in"]),
                      str(t["verify"]["accepted"]), str(exported.get(name, "")))
    print_table(table, console)
    task = next(folder.glob("*_live_v*.yaml"), None)
    if task is not None:
        console.print(f"evaluate with: fastmmeval run --include_path {folder} --tasks {task.stem} --model ...",
                      soft_wrap=True)


def _review(args: argparse.Namespace, console: Any) -> int:
    from fastmmeval.evolve.review import read_review, write_review_sheet
    from fastmmeval.evolve.workspace import Workspace

    space = Workspace(args.out)
    if args.decisions is None:
        out = space.review_path(args.version)
        if args.seed:
            out = out.with_name(f"{out.stem}_seed{args.seed}.html")
        sheet = write_review_sheet(space.dataset_dir(args.version), out, fraction=args.fraction, seed=args.seed)
        console.print(f"review sheet: {sheet} (open it, mark each item, save the decisions file, then "
                      f"fastmmeval evolve review --out {args.out} --decisions <file>)", soft_wrap=True)
        return 0
    result = read_review(args.decisions)
    table = Table(title=f"review of {result.task} (seed {result.seed}, {result.fraction:.0%} per atomic task)")
    for col in ("Atomic task", "Correct", "Incorrect", "Undecided", "Rate"):
        table.add_column(col, justify="left" if col == "Atomic task" else "right")
    for name, tally in [*result.by_task.items(), ("overall", result.overall)]:
        rate = "" if tally.rate is None else f"{tally.rate:.2%}"
        table.add_row(name, str(tally.correct), str(tally.incorrect), str(tally.undecided), rate)
    print_table(table, console)
    return 0
