"""`fastmmeval lite select|validate`: build lite task sets and check that they rank models like the full sets."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.table import Table

from fastmmeval.argtypes import float_range, name_list, positive_int, seed_int, unit_float
from fastmmeval.console import print_table, stdout_console
from fastmmeval.images import image_flags
from fastmmeval.lite.embed import IMAGE_ENCODERS, TEXT_ENCODERS


def add_parser(sub: Any) -> None:
    """Add `lite` with its `select` and `validate` subcommands."""
    lite = sub.add_parser("lite", help="lite task sets: k-center doc selection and rank-correlation validation")
    cmds = lite.add_subparsers(dest="lite_command", required=True)
    s = cmds.add_parser("select", help="choose a subset of each task; write doc ids and <task>_lite task files")
    s.add_argument("--tasks", required=True, type=name_list, help="comma-separated task or group names")
    s.add_argument("--size", type=positive_int, required=True, help="docs per task (a task with fewer is kept whole)")
    s.add_argument("--out", type=Path, required=True, help="folder for <task>.json/.txt and <task>_lite.yaml")
    s.add_argument("--method", default="kcenter", choices=["kcenter", "random", "kmeans", "stratified"])
    s.add_argument("--seed", type=seed_int, default=0, help="first k-center, random draws, k-means init")
    s.add_argument("--limit", type=positive_int, default=None, help="choose among the first N docs of each task only")
    s.add_argument("--category_field", default=None, help="doc field whose values stratify (--method stratified)")
    s.add_argument("--image_encoder", default="auto",
                   help=f"{', '.join(IMAGE_ENCODERS)}, or a local CLIP folder (auto: clip when its weights are cached)")
    s.add_argument("--text_encoder", default="auto",
                   help=f"{', '.join(TEXT_ENCODERS)}, or a local sentence-transformers folder "
                        "(auto: bge-m3 when its weights are cached)")
    s.add_argument("--image_weight", type=unit_float, default=0.5,
                   help="share of the squared distance given to the image part, in [0, 1] (0.5: equal)")
    s.add_argument("--device", default="cpu", help="k-center device: cpu or cuda (Triton kernel)")
    s.add_argument("--cache_dir", type=Path, default=None, help="embedding cache (default: $FASTMMEVAL_CACHE/lite)")
    s.add_argument("--include_path", action="append", default=[], help="extra folder of task YAML files")
    image_flags(s)
    s.add_argument("--no_progress", action="store_true", help="hide progress bars")
    v = cmds.add_parser("validate", help="compare model scores on full and lite sets")
    v.add_argument("--full", type=Path, nargs="+", required=True, help="run folders (or folders of them), full tasks")
    v.add_argument("--lite", type=Path, nargs="+", required=True,
                   help="run folders of <task>_lite tasks, or a `lite select` folder (scores from the full samples)")
    v.add_argument("--min_corr", type=float_range(-1.0, 1.0), default=0.87,
                   help="Pearson below this flags a task 'keep full'")
    v.add_argument("--bootstrap_iters", type=positive_int, default=1000, help="resamples for the pairwise ordering CIs")
    v.add_argument("--seed", type=seed_int, default=0)
    v.add_argument("--out", type=Path, default=Path("lite_validation.json"), help="JSON report (written atomically)")
    v.add_argument("--no_progress", action="store_true", help="hide progress bars")


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "n/a" if x is None else format(x, spec)


def _cmd_select(args: argparse.Namespace) -> int:
    from fastmmeval.lite.export import SelectOptions, select

    opts = SelectOptions(size=args.size, method=args.method, seed=args.seed, limit=args.limit,
                         image_encoder=args.image_encoder, text_encoder=args.text_encoder,
                         image_weight=args.image_weight, category_field=args.category_field, device=args.device,
                         progress=not args.no_progress, max_image_pixels=args.max_image_pixels,
                         allow_absolute_image_paths=args.allow_absolute_image_paths)
    if args.cache_dir is not None:
        opts.cache = args.cache_dir
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    selections = select(tasks, args.out, opts, [Path(p).resolve() for p in args.include_path])
    table = Table(title=f"lite selection ({args.method}, seed {args.seed})")
    for col in ("Task", "Docs", "Chosen", "Covering radius", "Note"):
        table.add_column(col, justify="right" if col in ("Docs", "Chosen", "Covering radius") else "left")
    for s in selections:
        table.add_row(s.task, str(s.n_docs), str(len(s.doc_ids)), _fmt(s.covering_radius, ".4f"), s.note)
    console = stdout_console()
    print_table(table, console)
    names = ",".join(f"{s.task}_lite" for s in selections)
    console.print(f"written to {args.out}; run with: fastmmeval run --include_path {args.out} --tasks {names} ...",
                  soft_wrap=True)
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from fastmmeval.lite.validate import Thresholds, validate
    from fastmmeval.util import write_json_atomic

    th = Thresholds(min_corr=args.min_corr, bootstrap_iters=args.bootstrap_iters, seed=args.seed)
    report = validate(args.full, args.lite, th, progress=not args.no_progress)
    write_json_atomic(args.out, report)
    table = Table(title=f"lite validation (Pearson threshold {args.min_corr}; orders kept: significant full-set pairs)")
    for col in ("Task", "Metric", "Full n", "Lite n", "Models", "Pearson", "Spearman", "Kendall", "Mean |gap|",
                "Orders kept", "Verdict"):
        table.add_column(col, justify="left" if col in ("Task", "Metric", "Verdict") else "right")
    for r in report["tasks"]:
        c, o = r["correlations"], r["orderings"]
        verdict = {None: "undetermined", True: "KEEP FULL", False: "lite ok"}[r["keep_full"]]
        table.add_row(r["task"], r["metric"], str(r["n_full"]), str(r["n_lite"]), str(r["n_models"]),
                      _fmt(c["pearson"]), _fmt(c["spearman"]), _fmt(c["kendall"]), _fmt(r["mean_abs_gap"], ".2f"),
                      f"{o['preserved']}/{o['significant']}", verdict)
    console = stdout_console()
    print_table(table, console)
    for r in report["tasks"]:
        for line in r["reasons"]:
            console.print(f"  {r['task']}: {line}")
    agg = report["aggregate"]
    if agg["models"]:
        t = Table(title=f"normalized aggregate (0-100, equal weights over {len(agg['tasks'])} tasks)")
        for col in ("Model", "Full", "Lite", "Lite (all subsets)"):
            t.add_column(col, justify="left" if col == "Model" else "right")
        for model, v in agg["models"].items():
            t.add_row(model, f"{v['full']:.2f}", f"{v['lite']:.2f}", f"{v['lite_all_subsets']:.2f}")
        print_table(t, console)
        for column, c in agg["correlations"].items():
            console.print(f"aggregate, full vs {column}: Pearson {_fmt(c['pearson'])}, Spearman "
                          f"{_fmt(c['spearman'])}, Kendall {_fmt(c['kendall'])}")
    console.print(f"report: {args.out}")
    return 0


def main(args: argparse.Namespace) -> int:
    """Run the `lite` subcommand chosen on the command line."""
    return _cmd_select(args) if args.lite_command == "select" else _cmd_validate(args)
