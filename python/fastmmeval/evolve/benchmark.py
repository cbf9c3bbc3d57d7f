"""The original multiple-choice benchmark an evolve run starts from, read through the task catalog: its
atomic tasks and L-2 abilities, each atomic task's distinct questions, their examples and images, in the
task's own hub schema. A `Layout` says which fields hold what; MMBench's is the default.

    bench = load_benchmark("mmbench_en_dev")
    bench.atomic_tasks()            # ["action_recognition", ...]
    bench.example(bench.questions("action_recognition")[0])   # {"question", "hint", "options", "answer"}

MMBench dev holds CircularEval's rotations of each question as extra rows (`index` i + k * 1,000,000):
a question is counted once, by its rotation 0 (its lowest index when that one is missing)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import Any

from PIL import Image

from fastmmeval.errors import ConfigError, DocError
from fastmmeval.extract.rules import LETTERS
from fastmmeval.metrics.circular import circular_group
from fastmmeval.tasks.catalog import Catalog
from fastmmeval.tasks.config import TaskConfig
from fastmmeval.tasks.render import load_image
from fastmmeval.tasks.sources import Rows, resolve_path
from fastmmeval.tasks.task import Task

CIRCULAR_METRIC = "circular_accuracy"


@dataclass(frozen=True)
class Layout:
    """Which fields of a task's rows hold what: the atomic task, its L-2 ability (None: the benchmark has
    no such level), the question, its hint (None: none), the option fields in letter order, the answer
    (a letter, an option's index or its text), the image, the row's id (MMBench's `index`, which numbers
    its rotations) and where an item came from (`source`, None: no such field). MMBench's is the default."""

    atomic: str = "category"
    ability: str | None = "L2-category"
    question: str = "question"
    hint: str | None = "hint"
    options: tuple[str, ...] = ("A", "B", "C", "D")
    answer: str = "answer"
    image: str = "image"
    index: str = "index"
    source: str | None = "source"

    def named_fields(self) -> dict[str, str]:
        """Each field the rows must have, by its role ('options[0]', ... for the options)."""
        out: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                out.update({f"{f.name}[{k}]": v for k, v in enumerate(value)})
            elif value is not None:
                out[f.name] = value
        return out


def blank(value: Any) -> bool:
    """Whether a field holds nothing: None, NaN, an empty string or the string "nan" (MMBench's hub
    data has all of them for a missing hint or option)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return True
    return isinstance(value, str) and value.strip() in ("", "nan")


class Benchmark:
    """One multiple-choice task of the catalog with its rows: `task`, its `config` and the `layout` its
    rows are read by. Row numbers are positions in the task's split."""

    def __init__(self, config: TaskConfig, layout: Layout) -> None:
        self.task = config.task
        self.config = config
        self.layout = layout
        self._task = Task(config)
        self.circular = CIRCULAR_METRIC in config.metrics
        self._columns: dict[str, list[Any]] = {}
        self._check_fields()

    @property
    def rows(self) -> Rows:
        """The task's rows."""
        return self._task.rows

    def column(self, name: str) -> list[Any]:
        """All values of the field `name` (not decoded: images stay as stored), read once."""
        if name not in self._columns:
            self._columns[name] = self.rows.column(name)
        return self._columns[name]

    def _check_fields(self) -> None:
        columns = self.columns
        for role, name in self.layout.named_fields().items():
            if name not in columns:
                raise ConfigError(
                    f"task {self.task}: its rows have no field {name!r} (the layout's {role}; fields: "
                    f"{', '.join(sorted(columns))})"
                )

    @cached_property
    def features(self) -> Any:
        """The rows' `datasets.Features` (the hub schema a new version is written in): those `datasets`
        read them with, or those a parquet data file records; ConfigError for rows of other files."""
        import datasets
        import pyarrow.parquet as pq

        if self.rows.features is not None:
            return self.rows.features
        spec = self.config.dataset
        files = [resolve_path(Path(spec.base_dir), f) for f in (spec.data_files or {}).get(self.config.split, [])]
        if files and files[0].suffix == ".parquet":
            return datasets.Features.from_arrow_schema(pq.read_schema(files[0]))
        raise ConfigError(
            f"task {self.task}: its rows come from files without feature types (jsonl); a new version is written "
            "in the schema of a hub, save_to_disk or parquet dataset"
        )

    @cached_property
    def columns(self) -> list[str]:
        """The names of the rows' fields, in the dataset's order."""
        try:
            return list(self.features)
        except ConfigError:
            return list(self.rows[0]) if len(self.rows) else []

    @cached_property
    def _questions(self) -> dict[str, list[int]]:
        """Atomic task -> row numbers of its distinct questions, in row order."""
        atomic = self.column(self.layout.atomic)
        refs = self._task.doc_refs()
        if self.circular:
            ids = self.column(self.layout.index)
            first: dict[Any, tuple[int, int]] = {}  # question -> (lowest index, its row)
            for ref in refs:
                try:
                    group = circular_group({"index": ids[ref.index]})
                except DocError as e:
                    raise ConfigError(f"task {self.task}, row {ref.index}: field {self.layout.index!r}: {e}") from None
                seen = first.get(group)
                if seen is None or int(ids[ref.index]) < seen[0]:
                    first[group] = (int(ids[ref.index]), ref.index)
            rows = sorted(row for _, row in first.values())
        else:
            rows = [ref.index for ref in refs]
        out: dict[str, list[int]] = {}
        for row in rows:
            if blank(atomic[row]):
                raise ConfigError(f"task {self.task}, row {row}: field {self.layout.atomic!r} (atomic task) is empty")
            out.setdefault(str(atomic[row]), []).append(row)
        return out

    def atomic_tasks(self) -> list[str]:
        """The atomic tasks' names, sorted."""
        return sorted(self._questions)

    def _known(self, atomic: str) -> list[int]:
        if atomic not in self._questions:
            raise ConfigError(f"task {self.task}: no atomic task {atomic!r} (has: {', '.join(self.atomic_tasks())})")
        return self._questions[atomic]

    def ability(self, atomic: str) -> str | None:
        """The atomic task's L-2 ability (that of its first question), None without an ability field."""
        if self.layout.ability is None:
            return None
        value = self.column(self.layout.ability)[self._known(atomic)[0]]
        return None if blank(value) else str(value)

    def questions(self, atomic: str) -> list[int]:
        """The row numbers of the atomic task's distinct questions (each once: its rotation 0)."""
        return list(self._known(atomic))

    def counts(self) -> dict[str, int]:
        """How many distinct questions each atomic task has."""
        return {atomic: len(self._questions[atomic]) for atomic in self.atomic_tasks()}

    def _where(self, row: int) -> str:
        return f"task {self.task}, row {row}"

    def _row_fields(self, row: int) -> dict[str, Any]:
        if not 0 <= row < len(self.rows):
            raise ConfigError(f"task {self.task}: no row {row} (it has {len(self.rows)})")
        names = [n for n in self.layout.named_fields().values() if n != self.layout.image]
        return {name: self.column(name)[row] for name in names}

    def example(self, row: int) -> dict[str, Any]:
        """The question at `row`: {"question", "hint" ("" without one), "options": [texts], "answer": letter}."""
        data = self._row_fields(row)
        values = [data.get(name) for name in self.layout.options]
        n = sum(not blank(v) for v in values)
        if n < 2 or any(blank(v) for v in values[:n]):
            raise DocError(f"{self._where(row)}: options {self.layout.options} must be filled in order, at least two")
        options = [str(v) for v in values[:n]]
        hint = data.get(self.layout.hint) if self.layout.hint else None
        return {
            "question": str(data[self.layout.question]),
            "hint": "" if blank(hint) else str(hint),
            "options": options,
            "answer": self._letter(row, data[self.layout.answer], options),
        }

    def _letter(self, row: int, value: Any, options: list[str]) -> str:
        letters = LETTERS[: len(options)]
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(options):
            return letters[value]
        text = str(value).strip() if value is not None else ""
        if text and text in letters:
            return text
        if text in options:
            return letters[options.index(text)]
        raise DocError(f"{self._where(row)}: answer {value!r} is not an option letter, index or option text")

    def image(self, row: int) -> Image.Image:
        """The image of the question at `row` (RGB; the first one where the field holds several)."""
        if not 0 <= row < len(self.rows):
            raise ConfigError(f"task {self.task}: no row {row} (it has {len(self.rows)})")
        value = self.rows[row].get(self.layout.image)
        parts = load_image(value, self.rows.image_root, self._where(row), self._task.max_image_pixels)
        if not parts:
            raise DocError(f"{self._where(row)}: field {self.layout.image!r} holds no image")
        return parts[0].image

    def option_counts(self, atomic: str) -> Counter[int]:
        """How many options the atomic task's questions have: option count -> questions."""
        columns = {name: self.column(name) for name in self.layout.options}
        return Counter(
            sum(not blank(columns[name][row]) for name in self.layout.options) for row in self._known(atomic)
        )

    def description(self) -> str:
        """What the task's file says about it, for the spec role: its description, the prompt its
        questions are asked with, the protocol notes, and the atomic tasks with their abilities."""
        lines = [f"{self.task}: {self.config.description}".rstrip()]
        for turn in self.config.doc_to_messages:
            text = "".join(value if kind == "text" else f"<{kind}>" for kind, value in turn.parts
                           if isinstance(value, str))  # fmt: skip
            lines.append(f"Prompt ({turn.role}): {text}")
        lines += [f"Note: {note}" for note in (self.config.lmms_eval.notes if self.config.lmms_eval else ())]
        lines.append("Atomic tasks (distinct questions, L-2 ability):")
        lines += [f"- {a} ({n}, {self.ability(a) or 'no ability level'})" for a, n in self.counts().items()]
        return "\n".join(lines)


def load_benchmark(task: str, include_paths: Sequence[Path] = (), layout: Layout | None = None) -> Benchmark:
    """The multiple-choice task `task` of the catalog (built-in plus `include_paths`), its rows loaded
    (offline: from --data_dir / $FASTMMEVAL_DATA_DIR) and read by `layout` (default: MMBench's). A task
    that is not multiple choice, or whose rows lack a field of the layout, is one ConfigError naming both."""
    configs = Catalog(include_paths).resolve([task])
    if len(configs) != 1 or configs[0].task != task:
        raise ConfigError(f"evolve: {task!r} is a group of tasks, not one task; name one of its tasks")
    config = configs[0]
    if config.output_type != "multiple_choice":
        raise ConfigError(f"task {task}: not a multiple-choice task (output_type {config.output_type}); "
                          "evolve updates multiple-choice benchmarks")  # fmt: skip
    if config.submission is not None:
        raise ConfigError(f"task {task}: its split has no public answers (a submission task); evolve a scored split")
    return Benchmark(config, layout or Layout())
