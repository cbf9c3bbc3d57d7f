"""`fastmmeval tasks`: list the tasks and groups, print a task's protocol card, check a task against
lmms-eval 0.7.3 (--parity) or download task data. It parses arguments and calls the `fastmmeval.tasks`
API (and `fastmmeval.parity`, which sits above it: hence a module of its own, not `tasks/cli.py`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from fastmmeval.argtypes import positive_int
from fastmmeval.console import print_table, stdout_console
from fastmmeval.errors import ConfigError
from fastmmeval.hub import go_offline, hub_offline, hub_reachable
from fastmmeval.tasks import resolve
from fastmmeval.tasks.card import protocol_card
from fastmmeval.tasks.catalog import Catalog
from fastmmeval.tasks.config import TaskConfig, mode_label
from fastmmeval.tasks.counts import doc_count
from fastmmeval.tasks.download import download
from fastmmeval.tasks.sources import data_dir_flag, use_data_dir


def add_parser(sub: Any) -> None:
    """Add `tasks` with its --info, --parity and --download actions (none: the listing)."""
    t = sub.add_parser("tasks", help="list registered tasks and groups, show one's protocol card, or download data")
    t.add_argument("--include_path", action="append", default=[])
    what = t.add_mutually_exclusive_group()
    what.add_argument("--info", metavar="NAME", default=None, help="print the protocol card of a task")
    t.add_argument("--json", action="store_true", help="with --info: print the card as JSON")
    what.add_argument(
        "--parity",
        metavar="NAME",
        default=None,
        help="score a pool of responses on the task's docs (its data on disk) with lmms-eval 0.7.3's code and "
        "ours, compare the prompts, and name the listed difference behind each mismatch (exit 1: unexplained)",
    )
    t.add_argument("--limit", type=positive_int, default=20, help="with --parity: the first N docs (default 20)")
    what.add_argument(
        "--download",
        metavar="NAMES",
        default=None,
        help="save the hub data of these tasks/groups under --data_dir (needs network)",
    )
    data_dir_flag(t)


def main(args: argparse.Namespace) -> int:
    """Run the action asked for; 1 when a parity check leaves a mismatch unexplained."""
    use_data_dir(args.data_dir)
    if args.parity:
        from fastmmeval.parity import check_task, report_lines  # lmms-eval's side: imported only when asked

        report = check_task(resolve([args.parity], args.include_path)[0], limit=args.limit)
        for line in report_lines(report):
            print(line)
        return 1 if report.unexplained else 0
    if args.download:
        if args.data_dir is None:
            raise ConfigError("--download needs --data_dir (where to save the datasets)")
        names = [n.strip() for n in args.download.split(",") if n.strip()]
        for spec, split, saved in download(names, args.data_dir, args.include_path):
            print(f"{spec.path} {spec.name or ''} {split} -> {saved}")
        return 0
    catalog = Catalog(Path(p) for p in args.include_path)
    if args.info:
        config = catalog.tasks.get(args.info)
        if config.dataset.path and not hub_offline() and not hub_reachable():
            # Without this the hub client retries for ~25 s before the card's data part gives up.
            go_offline()
            print("fastmmeval: note: the Hugging Face Hub cannot be reached: the card shows what a local copy allows "
                  "(data_error says what is missing)", file=sys.stderr)
        _print_card(config, args.json)
        return 0
    _print_listing(catalog)
    return 0


def _print_listing(catalog: Catalog) -> None:
    """One row per task (with its doc count and where that count comes from), then the groups."""
    table = Table(title="tasks")
    for col in ("Task", "Groups", "Mode", "Dataset", "Split", "Docs", "Docs from", "Metrics"):
        table.add_column(col)
    for name, c in catalog.tasks.items():
        d = c.dataset
        source = d.path or d.load_from_disk or (f"builder:{d.builder}" if d.builder else "files")
        mode = mode_label(c.output_type, c.mc_mode)
        count = doc_count(c)
        scored = f"submission:{c.submission}" if c.submission else ",".join(c.metric_keys or c.metrics)
        docs = "" if count.n is None else str(count.n)
        table.add_row(name, ",".join(c.group), mode, source, c.split, docs, count.source or "", scored)
    console = stdout_console()
    print_table(table, console)
    console.print("Docs from: counted = in the data on this machine (--data_dir, the Hugging Face datasets cache, "
                  "local files); declared = the task file's `docs:` (its data is not here); listed = a subset's id "
                  "file", soft_wrap=True, markup=False)
    for group, members in sorted(catalog.groups.items()):
        console.print(f"group {group}: {', '.join(members)}", soft_wrap=True, markup=False)


def _print_card(config: TaskConfig, as_json: bool) -> None:
    card = protocol_card(config)
    if as_json:
        print(json.dumps(card, indent=2, ensure_ascii=False))
        return
    console = stdout_console()
    table = Table(title=f"protocol card: {card['task']}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for key, value in card.items():
        if key == "example":
            value = "\n".join([*value["messages"], f"target: {value['target']}"])
        elif isinstance(value, (dict, list)):
            value = "\n".join(value) if isinstance(value, list) else json.dumps(value, ensure_ascii=False)
        table.add_row(key, "" if value is None else escape(str(value)))
    print_table(table, console)
