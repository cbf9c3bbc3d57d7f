"""Printing tables: boxed in a terminal, cells folded rather than cut and the first (name) column whole;
plain tab-separated lines, never truncated, after a `# title` line, when stdout is a pipe or a file, so
names such as mmbench_en and mmbench_cn stay apart."""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich's own answer to a closed pipe is SystemExit(1); ours is the BrokenPipeError the CLI ends
        # quietly on (exit 141), like any other write to a closed pipe.
        raise BrokenPipeError


def stdout_console() -> Console:
    """A rich console on stdout for the CLI's output."""
    return _Console()


def print_table(table: Table, on: Console | None = None) -> None:
    """Print `table` to `on` (default: stdout): a rich table in a terminal, else plain lines."""
    console = on or _Console()
    if console.is_terminal:
        for column in table.columns:  # a narrow terminal folds a cell onto more lines instead of cutting it
            column.overflow = "fold"
        if table.columns:
            name = table.columns[0]
            name.no_wrap = True
            name.min_width = max(cell_len(line) for c in [name.header, *name.cells] for line in _plain(c).split("\n"))
        console.print(table)
        return
    lines = [f"# {_plain(table.title)}"] if table.title else []
    if table.show_header:
        lines.append("\t".join(_plain(c.header) for c in table.columns))
    for row in zip(*(list(c.cells) for c in table.columns), strict=True):
        lines.append("\t".join(_plain(cell).replace("\n", "\n\t") for cell in row))
    console.file.write("".join(line + "\n" for line in lines))


def _plain(cell: object) -> str:
    if isinstance(cell, Text):
        return cell.plain
    return Text.from_markup(cell).plain if isinstance(cell, str) else str(cell)
