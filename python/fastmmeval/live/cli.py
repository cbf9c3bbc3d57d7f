"""`fastmmeval live capture|build|review|export`: build a month of LiveBench from current web pages."""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path
from typing import Any

from rich.table import Table

from fastmmeval.argtypes import float_range, positive_int, seed_int
from fastmmeval.console import print_table, stdout_console

ROLE_HELP = {
    "generator": "writes the questions (the quizmaster)",
    "extractor": "reads each page's text, images and news (default: the generator's model)",
    "checker": "checks and repairs each question (default: the generator's model)",
    "finalizer": "finalizes answer and 10-point criteria (default: the generator's model)",
    "scorer": "grades each item's quality 0-10 (default: the generator's model)",
}


def _this_month() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--month", default=_this_month(), help="YYYY-MM (default: this month, UTC)")
    p.add_argument("--out", type=Path, default=None, help="the month's build folder (default: live/<month>)")


def _capture_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sources", type=Path, default=None, help="YAML registry of sites (default: the shipped one)")
    p.add_argument("--capture_mode", default="single", choices=["single", "rolling", "full"],
                   help="one screen, rolling screens, or the full page (height-capped)")
    p.add_argument("--contexts", type=positive_int, default=4, help="browser contexts capturing at once")
    p.add_argument("--allow_host", action="append", default=[],
                   help="a host capture may also load from (and its subdomains), e.g. a site's image CDN; repeatable")
    p.add_argument("--earlier", type=Path, nargs="*", default=[],
                   help="earlier months' build folders or datasets (unchanged pages skipped, near-duplicates removed)")
    p.add_argument("--no_progress", action="store_true", help="hide progress bars")


def add_parser(sub: Any) -> None:
    """Add `live` with its `capture`, `build`, `review` and `export` subcommands."""
    live = sub.add_parser("live", help="LiveBench: build a month of questions from current web pages")
    cmds = live.add_subparsers(dest="live_command", required=True)
    c = cmds.add_parser("capture", help="screenshot every source (the first stage of build, cached for it)")
    _common(c)
    _capture_flags(c)
    b = cmds.add_parser("build", help="capture -> extract -> generate -> check -> finalize -> score -> select")
    _common(b)
    _capture_flags(b)
    for role, text in ROLE_HELP.items():
        b.add_argument(f"--{role}", required=role == "generator", default=None, help=f"backend that {text}")
        b.add_argument(f"--{role}_args", default="", help=f"--model_args of the {role}'s backend")
    b.add_argument("--max_new_tokens", type=positive_int, default=4096, help="per role call")
    b.add_argument("--threshold", type=float_range(0.0, 10.0), default=6.0, help="lowest quality score kept (0-10)")
    b.add_argument("--size", type=positive_int, default=300, help="most items kept")
    b.add_argument("--seed", type=seed_int, default=0, help="choice among equally scored items")
    b.add_argument("--workers", type=positive_int, default=32, help="stage calls in flight at most")
    b.add_argument("--contam_index", type=Path, default=None,
                   help="a contamination index to scan the questions against")
    r = cmds.add_parser("review", help="write the review page of a build (accept/reject, saves a decisions file)")
    _common(r)
    e = cmds.add_parser("export", help="write the month's dataset and its task file live_bench_<YYYY_MM>")
    _common(e)
    e.add_argument("--decisions", type=Path, default=None, help="the review page's decisions file")


def _out(args: argparse.Namespace) -> Path:
    from fastmmeval.live.records import check_month

    return args.out if args.out is not None else Path("live") / check_month(args.month)


def _settings(args: argparse.Namespace) -> Any:
    from fastmmeval.live.capture import CaptureSettings

    return CaptureSettings(mode=args.capture_mode, contexts=args.contexts)


def _cmd_capture(args: argparse.Namespace) -> int:
    from fastmmeval.live.pipeline import capture_sources
    from fastmmeval.live.sources import allowed_hosts, load_sources

    out = _out(args)
    sources = load_sources(args.sources)
    captures = capture_sources(args.month, out, sources, _settings(args), args.earlier,
                               allowed_hosts(sources, args.allow_host), progress=not args.no_progress)
    table = Table(title=f"captures {args.month}")
    for col in ("Source", "Status", "Screens", "Unchanged", "Error"):
        table.add_column(col)
    for c in captures:
        table.add_row(c.site.name, str(c.status or ""), str(len(c.screens)), "yes" if c.unchanged else "",
                      c.error or "")
    console = stdout_console()
    print_table(table, console)
    console.print(f"{sum(c.error is None for c in captures)}/{len(captures)} captured into {out}")
    return 0


def _cmd_build(args: argparse.Namespace) -> int:
    from fastmmeval.live.pipeline import BuildConfig, build
    from fastmmeval.live.roles import RoleSpec
    from fastmmeval.live.sources import allowed_hosts, load_sources
    from fastmmeval.models.base import parse_model_args

    def spec(role: str) -> RoleSpec:
        model, raw = getattr(args, role), getattr(args, f"{role}_args")
        if model is None:
            model, raw = args.generator, raw or args.generator_args
        return RoleSpec(role, model, parse_model_args(raw), max_new_tokens=args.max_new_tokens)

    out = _out(args)
    sources = load_sources(args.sources)
    config = BuildConfig(args.month, out, tuple(sources), tuple(spec(r) for r in ROLE_HELP), _settings(args),
                         args.threshold, args.size, args.seed, args.workers, tuple(args.earlier), args.contam_index,
                         allowed_hosts(sources, args.allow_host), progress=not args.no_progress)
    built = build(config)
    table = Table(title=f"live build {args.month}")
    for col in ("Stage", "In", "Out", "Failed"):
        table.add_column(col, justify="left" if col == "Stage" else "right")
    for stage, counts in built.manifest["stages"].items():
        table.add_row(stage, *(str(counts.get(k, 0)) for k in ("in", "out", "failed")))
    console = stdout_console()
    print_table(table, console)
    console.print(f"{len(built.items)} items, {len(built.selection.kept)} kept; {len(built.failures)} failures "
                  f"recorded in {out / 'build.json'}; next: fastmmeval live review --out {out}", soft_wrap=True)
    return 0


def _cmd_review(args: argparse.Namespace) -> int:
    from fastmmeval.live.pipeline import review

    page = review(_out(args))
    stdout_console().print(f"review page: {page} (open it, decide, save the decisions file, then "
                           f"fastmmeval live export --out {_out(args)} --decisions <file>)", soft_wrap=True)
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from fastmmeval.live.pipeline import export

    task = export(_out(args), args.decisions)
    stdout_console().print(f"dataset in {task.parent}; evaluate with: fastmmeval run --include_path {task.parent} "
                           f"--tasks {task.stem} --judge_model ... --model ...", soft_wrap=True)
    return 0


def main(args: argparse.Namespace) -> int:
    """Run the `live` subcommand chosen on the command line."""
    return {"capture": _cmd_capture, "build": _cmd_build, "review": _cmd_review,
            "export": _cmd_export}[args.live_command](args)
