"""The task catalog: built-in task files plus any `--include_path` folders, and groups."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from fastmmeval.errors import ConfigError
from fastmmeval.registry import Registry
from fastmmeval.tasks import demo_data as _demo_data  # noqa: F401  (registers the `demo` builder)
from fastmmeval.tasks.config import TaskConfig, parse_subset, parse_task
from fastmmeval.tasks.inherit import EXTENDS, resolve_extends
from fastmmeval.tasks.yaml_lines import LineDict, load_yaml

BUILTIN_DIR = Path(__file__).parent / "builtin"
# A task file named `_*.yaml` is a template: not a task of its own, only a parent to `extends:`, by file or by
# name (its file's stem, e.g. `_live_bench`, from any folder: the first folder's, built-in first).
TEMPLATE_PREFIX = "_"


class Catalog:
    """Every known task and group by name; a group names a list of tasks."""

    def __init__(self, include_paths: Iterable[Path] = ()) -> None:
        self.tasks: Registry[TaskConfig] = Registry("task")
        self.groups: dict[str, list[str]] = {}
        files: list[tuple[Path, Path, LineDict]] = []  # (root folder, file, mapping as written)
        templates: dict[str, tuple[Path, LineDict, Path]] = {}  # by name: (file, mapping as written, folder)
        for folder in [BUILTIN_DIR, *include_paths]:
            if not Path(folder).is_dir():
                raise ConfigError(f"--include_path {folder}: not a folder")
            for path in sorted(Path(folder).rglob("*.yaml")):
                data = load_yaml(path)
                if not path.name.startswith(TEMPLATE_PREFIX):
                    files.append((Path(folder), path, data))
                elif "task" in data:  # a task file named like a template would be skipped without a word
                    raise ConfigError(f"{path}:{data.line_of('task')}: a `_*.yaml` file is a template, not a "
                                      "task: rename the file or drop `task:`")
                else:
                    templates.setdefault(path.stem, (path, data, Path(folder)))
        written = {d["task"]: (path, d, root) for root, path, d in files if isinstance(d.get("task"), str)}
        parents = {**templates, **written}
        subsets: list[tuple[Path, LineDict]] = []
        for root, path, data in files:
            if "subset_of" in data and EXTENDS in data:  # the parent's keys would be refused as if written there
                raise ConfigError(f"{data.where(EXTENDS)}: a subset task file (subset_of) cannot use extends")
            self._add_file(path, resolve_extends(path, data, root, parents.get), subsets)
        for path, data in subsets:  # after every folder, so a subset may name a task defined anywhere
            base = data["subset_of"]
            if not isinstance(base, str) or base not in self.tasks:
                raise ConfigError(f"{path}:{data.line_of('subset_of')}: subset_of: {self.tasks.unknown_message(base)}")
            self._add_config(path, parse_subset(path, data, self.tasks.get(base)))
        for group, members in self.groups.items():
            for name in members:
                if name not in self.tasks:
                    raise ConfigError(f"group {group!r} names {self.tasks.unknown_message(name)}")

    def _add_file(self, path: Path, data: LineDict, subsets: list[tuple[Path, LineDict]]) -> None:
        if "subset_of" in data:
            subsets.append((path, data))
            return
        if "task" not in data and "tasks" in data:
            if set(data) - {"group", "tasks", "description"} or not isinstance(data.get("group"), str):
                raise ConfigError(f"{path}:{data.line}: a group file has `group: NAME` and `tasks: [...]` only")
            members = data["tasks"]
            if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
                raise ConfigError(f"{path}:{data.line_of('tasks')}: `tasks` must be a list of task names")
            self.groups.setdefault(data["group"], []).extend(members)
            return
        self._add_config(path, parse_task(path, data))

    def _add_config(self, path: Path, config: TaskConfig) -> None:
        if config.task in self.tasks:
            raise ConfigError(f"{path}: task {config.task!r} is defined twice")
        self.tasks.add(config.task, config)
        for group in config.group:
            if config.task not in self.groups.setdefault(group, []):
                self.groups[group].append(config.task)

    def resolve(self, names: Iterable[str]) -> list[TaskConfig]:
        """Task configs for task and group names, groups expanded, each task once."""
        out: dict[str, TaskConfig] = {}
        for name in names:
            if name in self.groups:
                for member in self.groups[name]:
                    out.setdefault(member, self.tasks.get(member))
            elif name in self.tasks:
                out.setdefault(name, self.tasks.get(name))
            else:
                known = Registry[None]("task")
                for n in [*self.tasks, *self.groups]:
                    known.add(n, None)
                raise ConfigError(known.unknown_message(name))
        return list(out.values())
