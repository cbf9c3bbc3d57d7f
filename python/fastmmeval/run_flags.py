"""`fastmmeval run`'s lmms-eval habits beyond the evaluation itself: `--config FILE.yaml` (the flags'
defaults from a file; the command line wins), the resolved flags the manifest records, and what runs
once results.json is written (W&B / TensorBoard logging, the HTML report, a comparison with another run)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from fastmmeval.errors import ConfigError

# Flags that say what to do with a finished run: recorded in the manifest, not part of the run config.
NOT_SETTINGS = ("config", "wandb_args", "tensorboard", "compare", "no_report")


def add_habit_flags(p: argparse.ArgumentParser) -> None:
    """Add --gen_kwargs, --system_instruction, --config and the end-of-run flags to `fastmmeval run`."""
    p.add_argument(
        "--gen_kwargs",
        default="",
        help="k=v,... over every generating task's generation settings (max_new_tokens, temperature, top_p, "
        "stop or until: one stop string), e.g. max_new_tokens=64,temperature=0. Part of each task's fingerprint",
    )
    p.add_argument(
        "--system_instruction",
        default=None,
        help="a system message before every request's messages (in front of a task's own system turn). Part of "
        "each task's fingerprint",
    )
    p.add_argument("--config", type=Path, default=None,
                   help="YAML file of run flags (names without --, e.g. `model: socratic`): defaults the command "
                   "line overrides")
    p.add_argument("--wandb_args", default=None,
                   help="k=v,... (project=..., name=...): log the run's metrics, breakdowns and samples to W&B")
    p.add_argument("--tensorboard", type=Path, default=None, help="folder to write the run's scalars to (TensorBoard)")
    p.add_argument("--compare", type=Path, default=None,
                   help="an earlier run folder: print a one-line-per-task comparison after the results table")
    p.add_argument("--no_report", action="store_true", help="do not write report.html into the run folder")


def config_file(argv: list[str]) -> Path | None:
    """The `--config` file of a `run` command line, if it names one."""
    if not argv or argv[0] != "run":
        return None
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", type=Path, default=None)
    return pre.parse_known_args(argv[1:])[0].config


def apply_config_file(parser: argparse.ArgumentParser, path: Path) -> None:
    """Make the flags `path` (a YAML mapping of flag names) gives the defaults of `parser`: a flag it
    gives is no longer required on the command line. An unknown name or a bad value is a ConfigError
    naming the file and the flag."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"--config {path}: cannot read it: {e}") from None
    if data is None:
        return
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a mapping of run flag names to values")
    actions = {a.dest: a for a in parser._actions if a.option_strings and a.dest not in ("help", "config")}
    for key, value in data.items():
        action = actions.get(str(key).removeprefix("--"))
        if action is None:
            raise ConfigError(f"--config {path}: unknown key {key!r} (a run flag name, e.g. model, tasks, limit)")
        action.default = _value(action, value, f"--config {path}: {key}")
        action.required = False


def _value(action: argparse.Action, value: Any, where: str) -> Any:
    """A file's value for a flag, checked as the flag's own parser would check its text."""
    if action.nargs == 0:  # an on/off flag
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if isinstance(action, argparse._AppendAction):
        items = value if isinstance(value, list) else [value]
        return [_checked(action, str(v), where) for v in items]
    if value is None or (action.nargs == "?" and isinstance(value, bool)):  # e.g. `resume: true`
        return value
    if isinstance(value, list):
        value = ",".join(str(v) for v in value)
    elif isinstance(value, dict):
        value = ",".join(f"{k}={v}" for k, v in value.items())
    elif isinstance(value, bool):
        raise ConfigError(f"{where}: expected a value, got {value!r}")
    return _checked(action, str(value), where)


def _checked(action: argparse.Action, text: str, where: str) -> Any:
    try:
        value = action.type(text) if callable(action.type) else text
    except (argparse.ArgumentTypeError, ValueError, TypeError) as e:
        raise ConfigError(f"{where}: {e}") from None
    if action.choices is not None and value not in action.choices:
        raise ConfigError(f"{where}: must be one of {', '.join(map(str, action.choices))}, got {value!r}")
    return value


def resolved_flags(args: argparse.Namespace) -> dict[str, Any]:
    """Every run flag's final value (from the command line, the --config file or the default), as JSON."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k not in ("command", "debug")}


def print_comparison(run_root: Path, other: Path, console: Console) -> None:
    """The one-line-per-task comparison of this run with `other` (`--compare`)."""
    from fastmmeval.report.comparison import terminal_lines

    for line in terminal_lines(run_root, other):
        console.print(line, soft_wrap=True)


def finish_run(args: argparse.Namespace, run_root: Path, console: Console) -> None:
    """What runs once results.json is written: logging to W&B and TensorBoard where asked, and the
    run's report.html (unless --no_report), whose path is printed."""
    if args.wandb_args is not None or args.tensorboard is not None:
        from fastmmeval.report.loggers import log_run, parse_wandb_args

        wandb_args = parse_wandb_args(args.wandb_args) if args.wandb_args is not None else None
        log_run(run_root, wandb_args=wandb_args, tensorboard_dir=args.tensorboard)
    if not args.no_report:
        from fastmmeval.report import write_run_report

        console.print(f"report: {write_run_report(run_root)}", soft_wrap=True, markup=False)
