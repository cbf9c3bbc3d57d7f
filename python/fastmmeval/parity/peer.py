"""lmms-eval 0.7.3's own code for one task, called the way its evaluator calls it: the task's YAML
(merged over what it `include`s), its `!function` hooks imported from its `utils.py`, its filters
and metrics.

lmms-eval is installed without its dependency set (`pip install --no-deps lmms-eval==0.7.3`, plus
loguru, sacrebleu, evaluate and pytz for `lmms_eval.api.metrics`). `lmms_eval/tasks/__init__.py`
indexes every task and needs that whole set, so task modules are imported under a bare stand-in for
the `lmms_eval.tasks` package instead."""

from __future__ import annotations

import copy
import importlib
import importlib.metadata
import importlib.util
import inspect
import re
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from fastmmeval.errors import FastmmevalError
from fastmmeval.parity.patches import Patched, set_up

VERSION = "0.7.3"
# A part of lmms-eval's prompt: ("text", str) or ("image", PIL image).
PeerPart = tuple[str, Any]


class PeerUnavailable(FastmmevalError):
    """lmms-eval 0.7.3 (the code a parity check compares with) cannot be imported."""


@dataclass(frozen=True)
class PeerFailure:
    """What lmms-eval reports for a result key whose aggregation raised (its run would stop there)."""

    error: str


def lmms_eval_module(name: str) -> types.ModuleType:
    """The module `lmms_eval.<name>` of lmms-eval 0.7.3, e.g. "tasks.pope.utils" or "api.metrics"."""
    _check_installed()
    full = f"lmms_eval.{name}"
    if full in sys.modules or not name.startswith("tasks."):
        return importlib.import_module(full)
    if "lmms_eval.tasks" not in sys.modules:
        # It stays: task code imports its siblings lazily, inside the hooks (mmstar's and
        # realworldqa's `_task_utils.mcq_extract`), long after this import returns.
        package = types.ModuleType("lmms_eval.tasks")
        package.__path__ = [str(tasks_dir())]
        sys.modules["lmms_eval.tasks"] = package
    return importlib.import_module(full)


@cache
def _check_installed() -> None:
    """PeerUnavailable unless lmms-eval 0.7.3 is installed (read once: each read parses its metadata)."""
    try:
        installed = importlib.metadata.version("lmms-eval")
    except importlib.metadata.PackageNotFoundError:
        raise PeerUnavailable(
            f"lmms-eval is not installed: pip install --no-deps lmms-eval=={VERSION} loguru sacrebleu evaluate pytz"
        ) from None
    if installed != VERSION:
        raise PeerUnavailable(f"parity checks compare with lmms-eval {VERSION}, found {installed}")


def tasks_dir() -> Path:
    """lmms-eval's `tasks/` folder."""
    spec = importlib.util.find_spec("lmms_eval")
    if spec is None or not spec.submodule_search_locations:
        raise PeerUnavailable(f"lmms-eval is not installed: pip install --no-deps lmms-eval=={VERSION}")
    return Path(spec.submodule_search_locations[0]) / "tasks"


class _Tagged(yaml.SafeLoader):
    """Reads lmms-eval's task YAML, where hooks are `!function module.name` tags."""


_Tagged.add_multi_constructor("!", lambda loader, suffix, node: _Hook(loader.construct_scalar(node)))


@dataclass(frozen=True)
class _Hook:
    """A `!function module.name` reference of a task YAML."""

    ref: str


def _read_yaml(path: Path) -> dict[str, Any]:
    data = yaml.load(path.read_text(encoding="utf-8"), Loader=_Tagged)  # noqa: S506 (SafeLoader subclass)
    if isinstance(data, dict) and "include" in data:
        parent = path.parent / data.pop("include")
        data = {**_read_yaml(parent), **data}
    return data if isinstance(data, dict) else {}


@cache
def _task_files() -> dict[str, Path]:
    """lmms-eval task name -> its YAML file (a name given by `task:`, found without parsing every file)."""
    named = re.compile(r"^task\s*:\s*['\"]?([^'\"\s#]+)", re.M)  # flickr30k writes `task : name`
    out: dict[str, Path] = {}
    for path in sorted(tasks_dir().rglob("*.yaml")):
        for name in named.findall(path.read_text(encoding="utf-8", errors="replace")):
            out.setdefault(name, path)
    return out


@dataclass
class PeerTask:
    """One lmms-eval task: its YAML and the folder its hooks are imported from."""

    name: str
    folder: Path
    config: dict[str, Any]
    # Replacements for module attributes (e.g. a GPT call) while its hooks run: "utils.get_chat_response" -> value.
    patches: dict[str, Any] = field(default_factory=dict)
    # What aggregations taking lmms-eval's run arguments get (`args`, e.g. a namespace with output_path).
    run_args: Any = None

    @classmethod
    def load(cls, name: str) -> PeerTask:
        """The lmms-eval task called `name`, with the patches that let it run here (parity.setups)."""
        path = _task_files().get(name)
        if path is None:
            raise PeerUnavailable(f"lmms-eval {VERSION} has no task {name!r}")
        peer = cls(name, path.parent, _read_yaml(path))
        set_up(peer, path.parent.relative_to(tasks_dir()).as_posix())
        return peer

    # --- hooks ---------------------------------------------------------------------------------

    def module(self, name: str) -> types.ModuleType:
        """A module of the task's folder, e.g. "utils"."""
        relative = self.folder.relative_to(tasks_dir())
        return lmms_eval_module(".".join(("tasks", *relative.parts, name)))

    def hook(self, key: str) -> Callable[..., Any] | None:
        """The function the YAML names under `key` (None when it names none)."""
        value = self.config.get(key)
        if not isinstance(value, _Hook):
            return None
        module, name = value.ref.rsplit(".", 1)
        return getattr(self.module(module), name)

    def patched(self) -> Patched:
        """A context in which `patches` replace the attributes they name (see `Patched`)."""
        return Patched(self.module, self.patches)

    @property
    def specific_kwargs(self) -> dict[str, Any] | None:
        """The `default` entry of `lmms_eval_specific_kwargs` (what a model without its own entry gets)."""
        kwargs = self.config.get("lmms_eval_specific_kwargs")
        return dict(kwargs.get("default", {})) if isinstance(kwargs, Mapping) else None

    # --- docs and prompts ----------------------------------------------------------------------

    def process_docs(self, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The task's docs from hub rows: `process_docs` applied when the YAML names one (it maps
        datasets.Dataset to datasets.Dataset)."""
        docs = [copy.copy(dict(r)) for r in rows]
        fn = self.hook("process_docs")
        if fn is None:
            return docs
        import datasets

        with self.patched():
            out = fn(datasets.Dataset.from_list(docs))
        return [dict(r) for r in out]

    def prompt(self, doc: Mapping[str, Any]) -> list[PeerPart]:
        """The user turn lmms-eval's chat models get for `doc`: its `doc_to_messages`, or (as
        `ConfigurableTask._auto_doc_to_messages` builds it) every visual, then `doc_to_text`."""
        doc = copy.deepcopy(dict(doc))
        with self.patched():
            fn = self.hook("doc_to_messages")
            if fn is not None:
                messages = _call(fn, doc, self.specific_kwargs)
                return [_part(c) for m in messages if m.get("role") == "user" for c in m["content"]]
            visuals = self._call_field("doc_to_visual", doc) or []
            text = self._call_field("doc_to_text", doc)
        return [*(("image", v) for v in visuals), ("text", text)]

    def _call_field(self, key: str, doc: dict[str, Any]) -> Any:
        fn = self.hook(key)
        if fn is not None:
            return _call(fn, doc, self.specific_kwargs)
        value = self.config.get(key)
        if isinstance(value, str) and value in doc:
            return doc[value]
        if value is None:
            return None
        if isinstance(value, str):  # a Jinja template (plain text renders as itself), as ConfigurableTask reads it
            return lmms_eval_module("utils").apply_template(value, doc)
        raise PeerUnavailable(f"lmms-eval task {self.name}: {key} {value!r} is not a field, template or hook")

    def target(self, doc: Mapping[str, Any]) -> Any:
        """`doc_to_target`: a hook (given `model_specific_target_kwargs`' default when the YAML has
        it), a field name, or a literal."""
        value = self.config.get("doc_to_target")
        fn = self.hook("doc_to_target")
        if fn is None:
            return doc[value] if isinstance(value, str) and value in doc else value
        kwargs = self.config.get("model_specific_target_kwargs")
        with self.patched():
            if isinstance(kwargs, Mapping) and "default" in kwargs:
                return fn(copy.deepcopy(dict(doc)), kwargs["default"])
            return fn(copy.deepcopy(dict(doc)))

    # --- scores --------------------------------------------------------------------------------

    @property
    def metric_list(self) -> list[dict[str, Any]]:
        """The YAML's metric entries (metric, aggregation, metric kwargs)."""
        return [dict(m) for m in self.config.get("metric_list", [])]

    @property
    def filters(self) -> list[tuple[str, list[dict[str, Any]]]]:
        """(name, filter steps) of each `filter_list` entry; [("none", [])] without one."""
        entries = self.config.get("filter_list")
        if not entries:
            return [("none", [])]
        return [(e["name"], [dict(f) for f in e["filter"]]) for e in entries]

    def result_keys(self) -> set[str]:
        """The `metric,filter` keys lmms-eval reports (its `submission` file metric left out)."""
        metrics = [m["metric"] for m in self.metric_list if m["metric"] != "submission"]
        return {f"{m},{name}" for name, _ in self.filters for m in metrics}

    def process(self, doc: Mapping[str, Any], response: str) -> dict[str, dict[str, Any]]:
        """Per filter name, the per-doc metric items lmms-eval keeps for one response: the response
        through the filter, stripped (ConfigurableTask.process_results strips generated text), then
        the task's process_results (a `PeerFailure` for each metric where it raises) or its
        registered metrics."""
        out: dict[str, dict[str, Any]] = {}
        with self.patched():
            fn = self.hook("process_results")
            for name, steps in self.filters:
                filtered = self._filter(steps, doc, response)
                filtered = filtered.strip() if filtered is not None else ""
                if fn is not None:
                    try:
                        out[name] = fn(copy.deepcopy(dict(doc)), [filtered])
                    except Exception as e:  # a run of lmms-eval stops there: no item to aggregate
                        failure = PeerFailure(f"{fn.__name__}: {type(e).__name__}: {e}")
                        out[name] = {entry["metric"]: failure for entry in self.metric_list}
                else:
                    out[name] = self._builtin_metrics(doc, filtered)
        return out

    def _filter(self, steps: list[dict[str, Any]], doc: Mapping[str, Any], response: str) -> str:
        if not steps:
            return response
        build_filter_ensemble = lmms_eval_module("filters").build_filter_ensemble
        components = []
        for step in steps:
            kwargs = {k: v for k, v in step.items() if k != "function"}
            function = step["function"]
            if isinstance(function, _Hook):  # a filter class of the task's utils
                module, name = function.ref.rsplit(".", 1)
                components.append((getattr(self.module(module), name), kwargs))
            else:
                components.append((function, kwargs))
        ensemble = build_filter_ensemble("parity", components)  # a class (not a name) is used as it is
        result = ensemble.filters[0].apply([[response]], [copy.deepcopy(dict(doc))])
        for later in ensemble.filters[1:]:
            result = later.apply(result, [copy.deepcopy(dict(doc))])
        value = result[0]
        return value[0] if isinstance(value, (list, tuple)) else value

    def _builtin_metrics(self, doc: Mapping[str, Any], prediction: str) -> dict[str, Any]:
        """lmms-eval's registered metric functions on (gold, prediction), as ConfigurableTask.process_results
        calls them for generated text: with a list of golds, anls takes them all and any other metric is
        1.0 when any gold scores."""
        registry = lmms_eval_module("api.registry")
        lmms_eval_module("api.metrics")  # registers the metrics
        gold = self.target(doc)
        out = {}
        for entry in self.metric_list:
            metric = entry["metric"]
            kwargs = {k: v for k, v in entry.items() if k not in ("metric", "aggregation", "higher_is_better")}
            fn = registry.get_metric(metric)
            if isinstance(gold, list) and metric != "anls":
                scores = [_metric_value(fn(references=[g], predictions=[prediction], **kwargs), metric) for g in gold]
                out[metric] = 1.0 if any(scores) else 0.0
            else:
                golds = gold if isinstance(gold, list) else [gold]
                out[metric] = _metric_value(fn(references=golds, predictions=[prediction], **kwargs), metric)
        return out

    def aggregate(self, items: Sequence[dict[str, dict[str, Any]]]) -> dict[str, Any]:
        """The results lmms-eval reports (`metric,filter` -> value) from per-doc `process` outputs; a
        `PeerFailure` where its aggregation raises (e.g. MME's on an image without its two questions)
        or a doc's process_results raised."""
        registry = lmms_eval_module("api.registry")
        lmms_eval_module("api.metrics")
        out: dict[str, Any] = {}
        with self.patched():
            for name, _ in self.filters:
                for entry in self.metric_list:
                    metric = entry["metric"]
                    if metric == "submission":
                        continue
                    values = [i[name][metric] for i in items if metric in i[name]]
                    aggregation = entry.get("aggregation", "mean")
                    failed = next((v for v in values if isinstance(v, PeerFailure)), None)
                    if failed is not None:
                        out[f"{metric},{name}"] = failed
                    elif not values:  # no doc returned it: lmms-eval's evaluator has no sample_metrics entry to report
                        out[f"{metric},{name}"] = None
                    elif isinstance(aggregation, _Hook):
                        module, fn_name = aggregation.ref.rsplit(".", 1)
                        fn = getattr(self.module(module), fn_name)
                        try:
                            out[f"{metric},{name}"] = _call_aggregation(fn, values, self.run_args)
                        except Exception as e:  # a run of lmms-eval stops there: no value to compare
                            out[f"{metric},{name}"] = PeerFailure(f"{fn_name}: {type(e).__name__}: {e}")
                    else:
                        out[f"{metric},{name}"] = registry.get_aggregation(aggregation)(values)
        return out


def _metric_value(value: Any, metric: str) -> Any:
    return value[metric] if isinstance(value, dict) else value


def _call(fn: Callable[..., Any], doc: dict[str, Any], kwargs: dict[str, Any] | None) -> Any:
    """A doc hook called as lmms-eval calls it: with the specific kwargs when it takes a second argument."""
    params = inspect.signature(fn).parameters
    return fn(doc, kwargs) if len(params) >= 2 and kwargs is not None else fn(doc)


def _call_aggregation(fn: Callable[..., Any], values: list[Any], args: Any) -> Any:
    """An aggregation hook; those taking `args` (a run's options, for file output) get `args`."""
    params = inspect.signature(fn).parameters
    return fn(values, args) if len(params) >= 2 else fn(values)


def _part(content: Mapping[str, Any]) -> PeerPart:
    kind = content.get("type")
    if kind == "text":
        return ("text", content["text"])
    if kind == "image":
        return ("image", content.get("url", content.get("image")))
    raise PeerUnavailable(f"lmms-eval message part of type {kind!r} is not compared")
