"""YAML loading that remembers the line of every key, and typed reading of its values, for errors
that point into the file."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml

from fastmmeval.errors import ConfigError


class LineDict(dict):
    """A mapping read from YAML, with `line` (its own, 1-based) and `key_lines` per key, the file it was
    read from (`path`) and, for keys inherited from another file (`extends:`), that file (`key_paths`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.line = 0
        self.key_lines: dict[str, int] = {}
        self.path: Path | None = None
        self.key_paths: dict[str, Path] = {}

    def line_of(self, key: str) -> int:
        """The line where `key` is written, or the mapping's own line."""
        return self.key_lines.get(key, self.line)

    def path_of(self, key: str) -> Path | None:
        """The file where `key` is written."""
        return self.key_paths.get(key, self.path)

    def where(self, key: str) -> str:
        """`file:line` of `key`, for error messages."""
        return f"{self.path_of(key)}:{self.line_of(key)}"


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml's parser when PyYAML has it
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> LineDict:  # type: ignore[override]
        out = LineDict(super().construct_mapping(node, deep=deep))
        out.line = node.start_mark.line + 1
        out.key_lines = {k.value: k.start_mark.line + 1 for k, _ in node.value if isinstance(k, yaml.ScalarNode)}
        return out


def _refuse_tags(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    raise yaml.constructor.ConstructorError(
        None,
        None,
        f"tag !{suffix} is not allowed: task files are data; name a registered extractor, metric or "
        "builder instead",
        node.start_mark,
    )


_Loader.add_multi_constructor("!", _refuse_tags)
_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_mapping)  # type: ignore[arg-type]


def load_yaml(path: Path) -> LineDict:
    """Parse a YAML mapping; syntax errors become one line naming the file and line."""
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # noqa: S506 (safe loader subclass)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: malformed YAML: {e.problem or e.context}") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        reason = " ".join(str(e).split())  # PyYAML's reader errors span two lines
        raise ConfigError(f"{path}: cannot read YAML: {reason}") from None
    if not isinstance(data, LineDict):
        raise ConfigError(f"{path}:1: expected a mapping of task settings at the top level")
    _set_path(data, path)
    return data


def _set_path(value: Any, path: Path) -> None:
    if isinstance(value, LineDict):
        value.path = path
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    for child in children:
        _set_path(child, path)


class FieldReader:
    """Pulls typed values out of the LineDicts of the file at `path`, raising errors with file:line."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, data: LineDict, key: str, message: str) -> ConfigError:
        """The error of field `key` of `data`, naming the file and line where the key is written."""
        if not isinstance(data, LineDict):
            return ConfigError(f"{self.path}:0: field {key!r}: {message}")
        return ConfigError(f"{data.path_of(key) or self.path}:{data.line_of(key)}: field {key!r}: {message}")

    def check_keys(self, data: LineDict, allowed: set[str], what: str) -> None:
        """Refuse a key of `data` outside `allowed` (a `what` setting), naming the closest allowed one."""
        for key in data:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise self.fail(data, key, f"unknown {what} setting{hint}")

    def get(self, data: LineDict, key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        """`data[key]`, which must be of `kind` (a bool is no number); `default` when it is absent, else
        the key is required."""
        if key not in data:
            if default is ...:
                raise ConfigError(f"{self.path}:{data.line}: missing required field {key!r}")
            return default
        value = data[key]
        if not isinstance(value, kind) or (kind in (int, float) and isinstance(value, bool)):
            names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise self.fail(data, key, f"expected {names}, got {type(value).__name__} {value!r}")
        return value

    def str_list(self, data: LineDict, key: str, default: Any = ...) -> tuple[str, ...]:
        """`data[key]`, a string or a list of strings, as a tuple of strings."""
        value = self.get(data, key, (str, list), default)
        items = [value] if isinstance(value, str) else list(value)
        if not all(isinstance(v, str) for v in items):
            raise self.fail(data, key, "expected a string or a list of strings")
        return tuple(items)
