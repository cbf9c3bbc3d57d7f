"""`fastmmeval compare consistency|...`: is a new version of a benchmark the same test as the old one?"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fastmmeval.argtypes import non_negative_int, seed_int


def _task_pair(text: str) -> tuple[str, str]:
    names = [part.strip() for part in text.split(",")]
    if len(names) != 2 or not all(names):
        raise argparse.ArgumentTypeError(f"expected OLD,NEW task names, got {text!r}")
    return names[0], names[1]


def _consistency_parser(sub: Any) -> None:
    p = sub.add_parser("consistency", help="do two versions rank the same models the same way? (r, rho, tau, dRank)")
    p.add_argument("--runs", action="append", nargs="+", type=Path, required=True, metavar="RUN",
                   help="run folders (or folders of them) of one version; give it twice: the old version's, "
                   "then the new version's")
    p.add_argument("--tasks", type=_task_pair, required=True, metavar="OLD,NEW",
                   help="the task name in the old runs and in the new runs, e.g. mmbench_en_dev,mmbench_en_dev_live_v1")
    p.add_argument("--field", default=None,
                   help="the breakdown field whose categories are the task-model points (default: the task's first)")
    p.add_argument("--bootstrap", type=non_negative_int, default=1000, help="resamples over docs for the CIs (0: none)")
    p.add_argument("--seed", type=seed_int, default=0, help="seed of the bootstrap")
    p.add_argument("--out", type=Path, default=Path("compare"), help="folder for consistency.json and delta_rank.png")


def add_parser(sub: Any) -> None:
    """Add `compare` with its subcommands."""
    compare = sub.add_parser("compare", help="compare two versions of a benchmark (consistency of model rankings)")
    cmds = compare.add_subparsers(dest="compare_command", required=True)
    _consistency_parser(cmds)


def _consistency_table(report: Any) -> Any:
    """Table 2 of MMBench-Live, with Kendall tau, CIs and the orderings kept."""
    from rich.table import Table

    from fastmmeval.runscores import CORRELATIONS

    def stat(test: dict[str, Any]) -> str:
        if test["value"] is None:
            return "n/a"
        ci = f" [{test['ci95'][0]:+.3f}, {test['ci95'][1]:+.3f}]" if test["ci95"] else ""
        return f"{test['value']:+.4f}{ci}" + (f" p={test['p']:.3g}" if test["p"] is not None else "")

    table = Table(title=f"consistency {report.tasks['old']} -> {report.tasks['new']} (by {report.field or 'task'})")
    for col in ("Granularity", "n", "Pearson r [95% CI] p", "Spearman ρ [95% CI] p", "Kendall τ [95% CI] p",
                "Pairs kept", "Sig. pairs kept"):
        table.add_column(col, justify="left" if col == "Granularity" else "right")
    for name, level in report.levels.items():
        o = level["orderings"]
        table.add_row(name.replace("_", "-"), str(level["n"]), *(stat(level[k]) for k in CORRELATIONS),
                      f"{o['kept']}/{o['pairs']}", f"{o['significant_kept']}/{o['significant']}")
    return table


def _cmd_consistency(args: argparse.Namespace) -> int:
    from fastmmeval.compare.consistency import consistency
    from fastmmeval.console import print_table, stdout_console
    from fastmmeval.errors import ConfigError

    if len(args.runs) != 2:
        raise ConfigError(f"--runs is given twice (the old version's runs, then the new version's), "
                          f"got {len(args.runs)}")
    report = consistency(args.runs[0], args.runs[1], args.tasks, args.out, field=args.field,
                         bootstrap=args.bootstrap, seed=args.seed)
    console = stdout_console()
    print_table(_consistency_table(report), console)
    console.print(f"{len(report.models)} models x {len(report.categories)} categories; "
                  f"{report.files['report']}, {report.files['heatmap']}", soft_wrap=True)
    return 0


def main(args: argparse.Namespace) -> int:
    """Run the `compare` subcommand chosen on the command line."""
    return {"consistency": _cmd_consistency}[args.compare_command](args)
