"""`fastmmeval compare consistency|...`: is a new version of a benchmark the same test as the old one?"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fastmmeval.argtypes import name_list, non_negative_float, non_negative_int, positive_int, seed_int
from fastmmeval.images import image_flags
from fastmmeval.tasks.sources import data_dir_flag, use_data_dir


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


def _distribution_parser(sub: Any) -> None:
    p = sub.add_parser("distribution", help="are two versions' images alike? FID and PCA-KL of their embeddings, "
                                            "one category's label distribution")
    p.add_argument("--tasks", type=_task_pair, required=True, metavar="A,B",
                   help="the two tasks, e.g. mmbench_en_dev_live_v1,mmbench_en_dev (KL(A||B) is the first's)")
    p.add_argument("--encoder", default="efficientnet-lite0",
                   help="efficientnet-lite0 (offline, the default) or clip=DIR (a local CLIP ViT-L/14-336 folder, "
                   "the paper's encoder)")
    p.add_argument("--trials", type=positive_int, default=10, help="matched-sample trials (the larger set subsampled)")
    p.add_argument("--seed", type=seed_int, default=0, help="seed of the trials' draws")
    p.add_argument("--pca_dim", type=positive_int, default=256, help="dimensions of the PCA subspace of the KL")
    p.add_argument("--ridge", type=non_negative_float, default=1e-3,
                   help="added to both projected covariances, times the union's mean eigenvalue in the subspace")
    p.add_argument("--raw_features", action="store_true", help="the encoder's raw features (default: unit-scaled)")
    p.add_argument("--labels_category", default=None, help="also compare this category's labels (needs --labeler)")
    p.add_argument("--labels_field", default="category", help="the doc field holding the category")
    p.add_argument("--labeler", default=None, help="backend of the role that labels each question (an LLM)")
    p.add_argument("--labeler_args", default="", help="--model_args of the labeler's backend")
    p.add_argument("--workers", type=positive_int, default=8, help="labeler calls in flight at most")
    p.add_argument("--include_path", action="append", default=[], type=Path, help="extra folder of task YAML files")
    data_dir_flag(p)
    image_flags(p)
    p.add_argument("--no_progress", action="store_true", help="hide progress bars")
    p.add_argument("--out", type=Path, default=Path("compare"),
                   help="folder for distribution.json and distribution.png")


def _pacost_parser(sub: Any) -> None:
    p = sub.add_parser("pacost", help="is a model more confident on the questions than on paraphrases of them? "
                                      "(PaCoST, a text-side memorization signal)")
    p.add_argument("--model", required=True, help="backend of the evaluated model")
    p.add_argument("--model_args", default="", help="--model_args of the evaluated model's backend")
    p.add_argument("--tasks", type=name_list, required=True,
                   help="comma-separated task or group names, e.g. mmbench_en_dev,mmbench_en_dev_live_v1")
    p.add_argument("--paraphraser", required=True, help="backend of the role that paraphrases each question")
    p.add_argument("--paraphraser_args", default="", help="--model_args of the paraphraser's backend")
    p.add_argument("--max_new_tokens", type=positive_int, default=256, help="per paraphrase")
    p.add_argument("--question_field", default="question", help="the doc field holding the question paraphrased")
    p.add_argument("--limit", type=positive_int, default=None, help="only the first N docs of each task")
    p.add_argument("--batch_size", type=positive_int, default=None,
                   help="requests per call of the evaluated model (default: its backend's)")
    p.add_argument("--seed", type=seed_int, default=0, help="seed of the tasks' generation settings")
    p.add_argument("--workers", type=positive_int, default=8, help="paraphraser calls in flight at most")
    p.add_argument("--include_path", action="append", default=[], type=Path, help="extra folder of task YAML files")
    data_dir_flag(p)
    image_flags(p)
    p.add_argument("--out", type=Path, default=Path("compare"), help="folder for pacost.json and its call cache")


def add_parser(sub: Any) -> None:
    """Add `compare` with its subcommands."""
    compare = sub.add_parser("compare", help="compare two versions of a benchmark (consistency of model rankings)")
    cmds = compare.add_subparsers(dest="compare_command", required=True)
    _consistency_parser(cmds)
    _distribution_parser(cmds)
    _pacost_parser(cmds)


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


def _cmd_distribution(args: argparse.Namespace) -> int:
    from fastmmeval.compare.distribution import LabelSettings, distribution
    from fastmmeval.console import stdout_console
    from fastmmeval.errors import ConfigError
    from fastmmeval.live.roles import RoleSpec
    from fastmmeval.models.base import parse_model_args

    if (args.labels_category is None) != (args.labeler is None):
        raise ConfigError("--labels_category and --labeler go together (the category to label, the model labelling it)")
    labels = None
    if args.labels_category is not None:
        spec = RoleSpec("labeler", args.labeler, parse_model_args(args.labeler_args), max_new_tokens=256)
        labels = LabelSettings(args.labels_category, spec, args.labels_field, args.workers)
    use_data_dir(args.data_dir)
    report = distribution(*args.tasks, args.encoder, args.out, args.trials, args.seed, pca_dim=args.pca_dim,
                          ridge=args.ridge, normalize=not args.raw_features, labels=labels,
                          include_paths=args.include_path, max_image_pixels=args.max_image_pixels,
                          allow_absolute_image_paths=args.allow_absolute_image_paths, progress=not args.no_progress)
    stdout_console().print(report.summary(), soft_wrap=True)
    stdout_console().print(f"written to {args.out}", soft_wrap=True)
    return 0


def _cmd_pacost(args: argparse.Namespace) -> int:
    from fastmmeval.compare.pacost import pacost
    from fastmmeval.console import stdout_console
    from fastmmeval.live.roles import RoleSpec
    from fastmmeval.models.base import parse_model_args

    model = RoleSpec("model", args.model, parse_model_args(args.model_args))
    paraphraser = RoleSpec("paraphraser", args.paraphraser, parse_model_args(args.paraphraser_args),
                           max_new_tokens=args.max_new_tokens)
    use_data_dir(args.data_dir)
    report = pacost(model, [t.strip() for t in args.tasks.split(",") if t.strip()], paraphraser, args.out,
                    include_path=args.include_path, limit=args.limit, question_field=args.question_field,
                    seed=args.seed, batch_size=args.batch_size, workers=args.workers,
                    max_image_pixels=args.max_image_pixels, allow_absolute_image_paths=args.allow_absolute_image_paths)
    stdout_console().print(report.summary(), soft_wrap=True)
    return 0


def main(args: argparse.Namespace) -> int:
    """Run the `compare` subcommand chosen on the command line."""
    commands = {"consistency": _cmd_consistency, "distribution": _cmd_distribution, "pacost": _cmd_pacost}
    return commands[args.compare_command](args)
