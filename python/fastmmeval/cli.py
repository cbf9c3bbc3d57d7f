"""`fastmmeval`: the command line. It parses arguments and calls the Python API."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from fastmmeval.argtypes import name_list, non_negative_int, positive_float, positive_int, seed_int
from fastmmeval.console import print_table, stdout_console
from fastmmeval.errors import ConfigError, FastmmevalError
from fastmmeval.images import image_flags
from fastmmeval.protocol import MC_MODES
from fastmmeval.run_flags import (
    add_habit_flags,
    apply_config_file,
    config_file,
    finish_run,
    print_comparison,
    resolved_flags,
)
from fastmmeval.tasks.config import mode_label
from fastmmeval.tasks.sources import data_dir_flag, use_data_dir

if TYPE_CHECKING:
    from fastmmeval.distributed import Ranks
    from fastmmeval.results import RunDir

# Subcommands (flows) in modules of their own: each defines add_parser(sub) and main(args) -> int.
FLOWS: dict[str, str] = {
    "tasks": "fastmmeval.tasks_cli",
    "lite": "fastmmeval.lite.cli",
    "contam": "fastmmeval.contam.cli",
    "serve": "fastmmeval.serve.cli",
    "judge": "fastmmeval.judge.cli",
    "live": "fastmmeval.live.cli",
    "evolve": "fastmmeval.evolve.cli",
    "compare": "fastmmeval.compare.cli",
    "report": "fastmmeval.report.cli",
}
SUBCOMMANDS = ("run", "models", *FLOWS)
FAILURE_REASONS_SHOWN = 3  # per task


def _run_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("run", help="evaluate a model on tasks (flags follow lmms-eval)")
    p.add_argument("--model", required=True, help="backend name (see `fastmmeval models`)")
    p.add_argument("--model_args", default="", help="k=v,k2=v2 passed to the backend")
    p.add_argument("--tasks", required=True, type=name_list, help="comma-separated task or group names")
    p.add_argument("--limit", type=positive_int, default=None, help="only the first N docs of each task")
    p.add_argument(
        "--batch_size",
        type=positive_int,
        default=None,
        help="checkpoint granularity: samples are written every N docs answered, so a killed run repeats at most N "
        "(backends that answer a call at a time get N requests per call; the engine's own limit is the model arg "
        "max_batch_size). Default: the backend's own: 1 for local models, 4 x max_concurrency for APIs",
    )
    p.add_argument("--output_path", type=Path, default=Path("runs"), help="folder for run folders")
    p.add_argument(
        "--log_samples",
        action="store_true",
        help="accepted for lmms-eval compatibility: samples are always written (resume needs them)",
    )
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument(
        "--bootstrap_iters", type=non_negative_int, default=1000, help="resamples for non-mean stderrs (0: none)"
    )
    p.add_argument("--include_path", action="append", default=[], help="extra folder of task YAML files")
    p.add_argument(
        "--mc_mode",
        choices=MC_MODES,
        default=None,
        help="how every multiple_choice task is asked: gen (the model writes its answer, the task's extractor "
        "reads the letter) or ppl (each option's text scored by log-likelihood: acc and acc_norm). Part of each "
        "task's fingerprint. Default: each task file's own; generate tasks (MMMU, MMStar, ...) are untouched",
    )
    data_dir_flag(p)
    image_flags(p)
    p.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=False,
        help="continue the newest run with the same settings (or the run folder given)",
    )
    p.add_argument(
        "--retry_failed",
        action="store_true",
        help="with --resume: ask the model again for docs whose call failed (model error), e.g. API timeouts",
    )
    p.add_argument(
        "--predict_only",
        action="store_true",
        help="answer every doc and write the samples, score none (no targets read, no judge asked); tasks of "
        "splits scored on a server (group submission) write their submission file with or without it",
    )
    p.add_argument("--no_progress", action="store_true", help="hide progress bars")
    p.add_argument("--judge_model", default=None, help="backend of the judge for judged tasks (e.g. openai)")
    p.add_argument("--judge_args", default="", help="k=v,... for the judge backend (base_url, model, api_key_env)")
    p.add_argument("--judge_config", type=Path, default=None, help="JSON/YAML file listing judges (name, model, args)")
    p.add_argument(
        "--num_processes",
        type=positive_int,
        default=1,
        help="data parallel: launch N processes on this machine, each evaluating a share of the docs",
    )
    p.add_argument(
        "--dist_timeout",
        type=positive_float,
        default=300.0,
        help="data parallel: seconds a process waits for another (loading the model, one batch) before giving up",
    )
    add_habit_flags(p)
    return p


def build_parser(run_config: Path | None = None) -> argparse.ArgumentParser:
    """The argument parser of every subcommand; `run`'s flag defaults from the `run_config` YAML file if given."""
    parser = argparse.ArgumentParser(prog="fastmmeval", description=__doc__)
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)
    run = _run_parser(sub)
    if run_config is not None:
        apply_config_file(run, run_config)
    sub.add_parser("models", help="list registered model backends")
    for module in FLOWS.values():
        importlib.import_module(module).add_parser(sub)
    return parser


def results_table(results: dict[str, Any]) -> Table:
    """A terminal table: one row per task metric, with stderr and failure counts."""
    table = Table(title="fastmmeval results")
    for col in ("Task", "Ver", "Mode", "n", "Failed", "Metric", "Value", "±Stderr"):
        numeric = col in ("n", "Failed", "Value", "±Stderr")
        table.add_column(col, justify="right" if numeric else "left", no_wrap=True)
    for name, r in results.items():
        mode = mode_label(r["output_type"], r.get("mc_mode"))
        for metric, v in r["metrics"].items():
            value = "n/a" if v["value"] is None else f"{v['value']:.4f}"
            stderr = "n/a" if v["stderr"] is None else f"{v['stderr']:.4f}"
            failed = str(r["n_failed"])
            judge_failed = sum(r.get("failed_judgments", {}).get(use, 0) for use in (metric, "extract"))
            if judge_failed:
                failed += f" +{judge_failed} judge"
            table.add_row(name, str(r["version"]), mode, str(r["n"]), failed, metric, value, stderr)
        if not r["metrics"]:  # predicted, not scored
            table.add_row(name, str(r["version"]), mode, str(r["n"]), str(r["n_failed"]), "not scored", "n/a", "n/a")
    return table


def _cmd_run(args: argparse.Namespace, argv: list[str]) -> int:
    if args.retry_failed and not args.resume:
        raise ConfigError("--retry_failed retries the failed docs of a run: use it with --resume")
    from fastmmeval.tasks.overrides import parse_gen_kwargs

    parse_gen_kwargs(args.gen_kwargs)  # refused before any process starts
    use_data_dir(args.data_dir)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:  # one rank of torchrun or of our own launcher
        from fastmmeval.distributed import joined

        if args.num_processes not in (1, world):
            raise ConfigError(f"--num_processes {args.num_processes} but WORLD_SIZE={world} (torchrun?)")
        with joined(args.dist_timeout) as ranks:
            return _evaluate(args, argv, ranks)
    if args.num_processes > 1:
        from fastmmeval.distributed import launch

        return launch(argv, args.num_processes, args.dist_timeout)
    from fastmmeval.distributed import ONE_PROCESS

    return _evaluate(args, argv, ONE_PROCESS)


def _evaluate(args: argparse.Namespace, argv: list[str], ranks: Ranks) -> int:
    """Run, print the results and the failures; 1 when every doc of some task failed."""
    from fastmmeval.evaluate import RunConfig, evaluate
    from fastmmeval.judge.judge import judge_specs
    from fastmmeval.tasks.overrides import parse_gen_kwargs

    config = RunConfig(
        model=args.model,
        model_args=args.model_args,
        tasks=[t.strip() for t in args.tasks.split(",") if t.strip()],
        limit=args.limit,
        seed=args.seed,
        bootstrap_iters=args.bootstrap_iters,
        include_path=[str(Path(p).resolve()) for p in args.include_path],
        max_image_pixels=args.max_image_pixels,
        allow_absolute_image_paths=args.allow_absolute_image_paths,
        mc_mode=args.mc_mode,
        predict_only=args.predict_only,
        judges=judge_specs(args.judge_model, args.judge_args, args.judge_config),
        gen_kwargs=parse_gen_kwargs(args.gen_kwargs),
        system_instruction=args.system_instruction or None,
    )
    resume = Path(args.resume) if isinstance(args.resume, str) else bool(args.resume)
    run, results = evaluate(
        config,
        output_path=args.output_path,
        batch_size=args.batch_size,
        resume=resume,
        progress=not args.no_progress,
        command=["fastmmeval", *argv],
        ranks=ranks,
        retry_failed=args.retry_failed,
        flags=resolved_flags(args),
    )
    if not ranks.is_main:
        return 0
    console = stdout_console()
    print_table(results_table(results), console)
    overall = (run.read_json("results.json") or {}).get("overall")
    if overall and overall.get("overall") is not None:
        left_out = ", ".join(e["task"] for e in overall.get("excluded", []))
        console.print(
            f"overall (equal-weight mean of headline metrics on 0-100, {overall['n_tasks']} tasks): "
            f"{overall['overall']:.2f}" + (f"; left out: {left_out}" if left_out else "")
        )
    if args.compare is not None:
        print_comparison(run.root, args.compare, console)
    for name, r in results.items():
        if "submission" in r:
            console.print(f"{name}: submission file {run.root / r['submission']['file']} "
                          f"({r['submission']['predictions']} predictions)", soft_wrap=True, markup=False)
    console.print(f"run folder: {run.root}", soft_wrap=True)
    finish_run(args, run.root, console)
    return _report_failures(run, results)


def _report_failures(run: RunDir, results: dict[str, Any]) -> int:
    """Print, per task with failed docs, its most frequent reasons (on stderr); 1 when every doc of a task failed."""
    all_failed = []
    for name, r in results.items():
        if not r["n_failed"]:
            continue
        print(f"{name}: {r['n_failed']} of {r['n']} docs failed; most frequent reasons:", file=sys.stderr)
        for count, kind, reason in run.failure_reasons(name)[:FAILURE_REASONS_SHOWN]:
            print(f"  {count} x {kind}: {reason}", file=sys.stderr)
        if r["n_failed"] == r["n"]:
            all_failed.append(name)
    if all_failed:
        print(f"fastmmeval: error: every doc of {', '.join(all_failed)} failed (reasons above; results written to "
              f"{run.root})", file=sys.stderr)
        return 1
    return 0


def _cmd_models() -> None:
    from fastmmeval.models import MODELS

    table = Table(title="models")
    table.add_column("Model")
    table.add_column("Arguments (--model_args)")
    table.add_column("What")
    import dataclasses

    for name, cls in MODELS.items():
        fields = ", ".join(
            f.name + ("=<required>" if f.default is dataclasses.MISSING else f"={f.default!r}")
            for f in dataclasses.fields(cls.Args)
        )
        table.add_row(name, fields, (cls.__doc__ or "").strip().splitlines()[0])
    print_table(table)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (1 with a one-line error on bad input)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # --debug is taken anywhere on the line, not only before the subcommand.
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    # `fastmmeval --model ... --tasks ...` works like lmms-eval's bare invocation.
    if argv and argv[0] not in SUBCOMMANDS and argv[0].startswith(("--model", "--config")):
        argv = ["run", *argv]
    try:
        parser = build_parser(config_file(argv))
    except ConfigError as e:
        print(f"fastmmeval: error: {e}", file=sys.stderr)
        return 1
    args = parser.parse_args(argv)
    args.debug = debug
    try:
        return _dispatch(args, argv)
    except FastmmevalError as e:
        if args.debug:
            traceback.print_exc()
        print(f"fastmmeval: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fastmmeval: interrupted; finished samples are saved (continue with --resume)", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as other tools do
        _silence_stdout()
        return 141


def _dispatch(args: argparse.Namespace, argv: list[str]) -> int:
    status = 0
    if args.command == "run":
        status = _cmd_run(args, argv)
    elif args.command in FLOWS:
        status = importlib.import_module(FLOWS[args.command]).main(args)
    else:
        _cmd_models()
    sys.stdout.flush()  # a closed pipe shows here, inside main, not at interpreter exit
    return status


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail on the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (captured in tests)
        pass


if __name__ == "__main__":
    sys.exit(main())
