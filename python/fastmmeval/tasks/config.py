"""The task file schema: one fixed, visible protocol per task."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from fastmmeval.errors import ConfigError
from fastmmeval.protocol import MC_MODES, GenerationSettings
from fastmmeval.tasks.inherit import resolve_extends
from fastmmeval.tasks.messages import MessageTemplate, parse_messages
from fastmmeval.tasks.ppl import PplSpec, cut_after_options, parse_ppl
from fastmmeval.tasks.yaml_lines import FieldReader, LineDict, load_yaml

OutputType = Literal["generate", "multiple_choice"]

TASK_KEYS = {
    "task", "version", "group", "description", "dataset", "split", "doc_id", "doc_to_messages",
    "target", "output_type", "choices", "mc_mode", "extractor", "metrics", "generation",
    "process_doc", "where", "docs", "lmms_eval", "ppl", "submission", "breakdown",
}  # fmt: skip
DATASET_KEYS = {
    "path", "name", "revision", "load_from_disk", "data_files", "image_root", "builder", "allow_absolute_paths",
}  # fmt: skip
GENERATION_KEYS = {"max_new_tokens", "temperature", "top_p", "stop", "seed"}
# A subset task file: another task restricted to the doc ids listed in a file (e.g. a lite set).
SUBSET_KEYS = {"task", "subset_of", "doc_ids", "group", "description"}
METRIC_ENTRY_KEYS = ("metric", "as", "filter", "scale")
LMMS_EVAL_KEYS = {"task", "differences", "notes"}


@dataclass(frozen=True)
class LmmsEvalRef:
    """The lmms-eval 0.7.3 task this one reproduces; each deliberate difference from it by id (what
    differs and its effect on the score or the prompt), and notes on what is the same although it
    may not look so."""

    task: str
    differences: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class DatasetSpec:
    """Where rows come from: a hub id (`path`), a `load_from_disk` folder, local jsonl/parquet
    `data_files` (plus `image_root` for relative image paths), or a registered `builder` that
    writes such files. Relative paths are taken from `base_dir` (the task file's folder). An image path
    in a row stays inside `image_root`; an absolute one is opened only with `allow_absolute_paths`."""

    path: str | None = None
    name: str | None = None
    revision: str | None = None
    load_from_disk: str | None = None
    data_files: dict[str, list[str]] | None = None
    image_root: str | None = None
    builder: str | None = None
    allow_absolute_paths: bool = False
    base_dir: str = "."

    def identity(self) -> dict[str, Any]:
        """The fields that name the data (not where this machine keeps it)."""
        out = {k: v for k, v in asdict(self).items() if v is not None and k != "base_dir"}
        if not self.allow_absolute_paths:
            out.pop("allow_absolute_paths")  # fingerprints of tasks without the key stay what they were
        return out


@dataclass(frozen=True)
class TaskConfig:
    """A parsed task file."""

    task: str
    dataset: DatasetSpec
    split: str
    doc_to_messages: tuple[MessageTemplate, ...]
    target: str
    output_type: OutputType
    metrics: tuple[str, ...]
    extractor: str | None = None
    metric_keys: tuple[str, ...] = ()
    # Per metric: the filter name of its result keys (lmms-eval's `metric,filter`) and the factor
    # its reported values are multiplied by (e.g. 100 for a percentage); empty: "none" and 1.
    metric_filters: tuple[str, ...] = ()
    metric_scales: tuple[float, ...] = ()
    process_doc: str | None = None
    where: tuple[tuple[str, str], ...] = ()
    docs: int | None = None
    lmms_eval: LmmsEvalRef | None = None
    # The registered format of the file its evaluation server scores (a split without public answers:
    # no metrics, its target is not read).
    submission: str | None = None
    choices: str | None = None
    mc_mode: Literal["gen", "ppl"] | None = None
    ppl: PplSpec = field(default_factory=PplSpec)
    doc_id: str | None = None
    generation: GenerationSettings = field(default_factory=GenerationSettings)
    version: str = "0"
    doc_ids: tuple[str, ...] | None = None
    group: tuple[str, ...] = ()
    description: str = ""
    source_file: str = ""
    # Doc fields whose values split the results into categories (results.json's `breakdowns`), and the
    # file:line that declares them.
    breakdown: tuple[str, ...] = ()
    breakdown_where: str = ""

    def fingerprint(self) -> str:
        """Hash of everything in the protocol that can change a score (not paths or prose): of `protocol()`."""
        return protocol_hash(self.protocol())

    def protocol(self) -> dict[str, Any]:
        """Everything in the protocol that can change a score (not paths or prose), as the fingerprint
        hashes it."""
        payload = asdict(self)
        for key in ("description", "source_file", "group", "metric_keys", "metric_filters", "docs", "lmms_eval",
                    "breakdown", "breakdown_where"):
            payload.pop(key)  # names, notes and views of the scores, not protocol
        for key in ("process_doc", "where", "metric_scales", "submission"):
            if not payload[key]:
                payload.pop(key)  # fingerprints of tasks without them stay what they were
        if self.doc_ids is None:
            payload.pop("doc_ids")  # fingerprints of whole tasks stay what they were before subsets existed
        payload["dataset"] = self.dataset.identity()
        if self.mc_mode == "ppl":  # the prompt it is asked with; in gen mode the ppl block changes nothing
            payload["ppl"]["doc_to_messages"] = [asdict(m) for m in ppl_messages(self)]
        else:
            payload.pop("ppl")
        return payload


def protocol_hash(payload: dict[str, Any]) -> str:
    """The fingerprint of a protocol payload: 16 hex digits of the SHA-256 of its sorted JSON."""
    blob = json.dumps(payload, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def protocol_json(payload: dict[str, Any]) -> dict[str, Any]:
    """A protocol payload as results.json records it: JSON values, what JSON lacks as text (as the hash reads it)."""
    return json.loads(json.dumps(payload, sort_keys=True, default=str))


def parse_task(path: Path, data: LineDict | None = None) -> TaskConfig:
    """Read and check one task file (or its already-loaded mapping, `extends:` resolved). Read alone,
    a task file may extend another task file in its folder; a task name is looked up by the catalog."""
    data = resolve_extends(path, load_yaml(path), path.parent) if data is None else data
    r = FieldReader(path)
    r.check_keys(data, TASK_KEYS, "task")
    output_type = r.get(data, "output_type", str)
    if output_type not in ("generate", "multiple_choice"):
        raise r.fail(data, "output_type", f"must be generate or multiple_choice, got {output_type!r}")
    mc_mode = r.get(data, "mc_mode", str, None)
    choices = r.get(data, "choices", str, None)
    extractor = r.get(data, "extractor", str, None)
    if output_type == "multiple_choice":
        if choices is None:
            raise ConfigError(f"{path}:{data.line}: multiple_choice tasks need `choices` (the options field)")
        mc_mode = mc_mode or "gen"
        if mc_mode not in MC_MODES:
            raise r.fail(data, "mc_mode", f"must be gen or ppl, got {mc_mode!r}")
        if mc_mode == "gen" and extractor is None:
            extractor = "option_letter"
    elif mc_mode is not None:
        raise r.fail(data, "mc_mode", "only multiple_choice tasks have an mc_mode")
    submission = r.get(data, "submission", str, None)
    if submission is not None and "metrics" in data:
        raise r.fail(data, "metrics", "a submission task has no metrics: its split's answers are not public "
                     "(in a task file that extends a scored one, write `metrics: null`)")
    config = TaskConfig(
        task=r.get(data, "task", str),
        version=str(r.get(data, "version", (str, int, float), "0")),
        group=r.str_list(data, "group", ()),
        description=r.get(data, "description", str, ""),
        dataset=_parse_dataset(r, r.get(data, "dataset", dict), path),
        split=r.get(data, "split", str),
        doc_id=r.get(data, "doc_id", str, None),
        doc_to_messages=parse_messages(r, data),
        target=r.get(data, "target", str),
        output_type=output_type,
        choices=choices,
        mc_mode=mc_mode,
        ppl=parse_ppl(r, data, output_type),
        extractor=extractor,
        **(_parse_metrics(r, data) if submission is None else {"metrics": ()}),
        generation=_parse_generation(r, r.get(data, "generation", dict, LineDict())),
        process_doc=r.get(data, "process_doc", str, None),
        where=_parse_where(r, data),
        docs=r.get(data, "docs", int, None),
        lmms_eval=_parse_lmms_eval(r, data),
        submission=submission,
        source_file=str(path),
        breakdown=_parse_breakdown(r, data),
        breakdown_where=data.where("breakdown") if "breakdown" in data else "",
    )
    if mc_mode == "ppl":
        ppl_messages(config)  # a prompt with nothing to cut fails here, with its file
    return config


def ppl_messages(config: TaskConfig) -> tuple[MessageTemplate, ...]:
    """The prompt a multiple-choice task is asked with in ppl mode: its ppl block's, else its own cut after
    the `{options}` slot (`cut_after_options`). A task whose prompt has no such slot must write its ppl
    prompt."""
    if config.ppl.doc_to_messages is not None:
        return config.ppl.doc_to_messages
    cut = cut_after_options(config.doc_to_messages)
    if cut is None:
        raise ConfigError(
            f"{config.source_file}: task {config.task}: ppl mode needs `ppl: {{doc_to_messages: ...}}`, a prompt "
            "without the letter instruction (its prompt has no {options} slot to cut the instruction after)"
        )
    return cut


def mode_label(output_type: str, mc_mode: str | None) -> str:
    """How a task is asked, for tables: 'gen', 'mc/ppl' or 'mc/gen'."""
    return "gen" if output_type == "generate" else f"mc/{mc_mode}"


def with_mc_mode(config: TaskConfig, mc_mode: str) -> TaskConfig:
    """`config` asked in `mc_mode` (gen or ppl) as if its file said so (gen without an extractor reads the
    letter with option_letter); a generate task is returned as it is."""
    if mc_mode not in MC_MODES:
        raise ConfigError(f"mc_mode must be gen or ppl, got {mc_mode!r}")
    if config.output_type != "multiple_choice" or config.mc_mode == mc_mode:
        return config
    extractor = config.extractor or ("option_letter" if mc_mode == "gen" else None)
    out = replace(config, mc_mode=mc_mode, extractor=extractor)
    if mc_mode == "ppl":
        ppl_messages(out)
    return out


def _parse_metrics(r: FieldReader, data: LineDict) -> dict[str, tuple[Any, ...]]:
    """`metrics`: registered metric names, each optionally `{metric: NAME, as: KEY, filter: FILTER,
    scale: FACTOR}`: its result key (e.g. lmms-eval's), the filter name after the comma in its result
    keys (lmms-eval's `exact_match,flexible-extract`; default none) and a factor for its values."""
    entries = r.get(data, "metrics", (str, list))
    names, keys, filters, scales = [], [], [], []
    for entry in [entries] if isinstance(entries, str) else entries:
        entry = {"metric": entry} if isinstance(entry, str) else entry
        if not (isinstance(entry, dict) and "metric" in entry and set(entry) <= set(METRIC_ENTRY_KEYS)):
            raise r.fail(data, "metrics", f"each entry is a metric name or a mapping of {METRIC_ENTRY_KEYS}: {entry!r}")
        texts = [entry[k] for k in ("metric", "as", "filter") if k in entry]
        scale = entry.get("scale", 1.0)
        if not all(isinstance(v, str) and v and "," not in v for v in texts) or not _positive(scale):
            raise r.fail(data, "metrics", f"names are strings without commas, scale a positive number: {entry!r}")
        names.append(entry["metric"])
        keys.append(entry.get("as", entry["metric"]))
        filters.append(entry.get("filter", "none"))
        scales.append(float(scale))
    if not names or len(set(keys)) != len(keys):
        raise r.fail(data, "metrics", "needs at least one metric, each result key once")
    out: dict[str, tuple[Any, ...]] = {"metrics": tuple(names), "metric_keys": tuple(keys)}
    if any(f != "none" for f in filters):
        out["metric_filters"] = tuple(filters)
    if any(s != 1.0 for s in scales):
        out["metric_scales"] = tuple(scales)
    return out


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _parse_where(r: FieldReader, data: LineDict) -> tuple[tuple[str, str], ...]:
    """`where: {field: value, ...}`: keep only rows whose fields equal these values (as strings)."""
    where = r.get(data, "where", dict, LineDict())
    if not all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in where.values()):
        raise r.fail(data, "where", "each condition is field: string or integer value")
    return tuple((str(k), str(v)) for k, v in where.items())


def _parse_breakdown(r: FieldReader, data: LineDict) -> tuple[str, ...]:
    """`breakdown`: the doc field (or list of fields) whose values are the categories each metric is also
    reported on (e.g. MMBench's `[L2-category, category]`)."""
    fields = r.str_list(data, "breakdown", ())
    if not all(fields) or len(set(fields)) != len(fields):
        raise r.fail(data, "breakdown", f"each entry is a doc field name, each once: {list(fields)!r}")
    return fields


def _parse_lmms_eval(r: FieldReader, data: LineDict) -> LmmsEvalRef | None:
    ref = r.get(data, "lmms_eval", dict, None)
    if ref is None:
        return None
    r.check_keys(ref, LMMS_EVAL_KEYS, "lmms_eval")
    notes = r.str_list(ref, "notes", ())
    return LmmsEvalRef(task=r.get(ref, "task", str), differences=_differences(r, ref), notes=notes)


def _differences(r: FieldReader, ref: LineDict) -> dict[str, str]:
    """`differences: {id: text}`, ids snake_case: each names the parity check that shows it."""
    value = r.get(ref, "differences", dict, {})
    for key, text in value.items():
        if not isinstance(key, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", key) or not isinstance(text, str):
            raise r.fail(ref, "differences", f"each entry is snake_case_id: text, got {key!r}: {text!r}")
    return dict(value)


def parse_subset(path: Path, data: LineDict, base: TaskConfig) -> TaskConfig:
    """A subset task file (`task`, `subset_of`, `doc_ids`: a .txt file with one id per line or a
    .json file with a "doc_ids" list, relative to the task file; optional `group`, `description`):
    `base` run on those docs only. The base task's groups are not inherited."""
    r = FieldReader(path)
    r.check_keys(data, SUBSET_KEYS, "subset task")
    ids_path = Path(r.get(data, "doc_ids", str))
    ids_path = ids_path if ids_path.is_absolute() else path.parent / ids_path
    try:
        text = ids_path.read_text(encoding="utf-8")
        ids = json.loads(text).get("doc_ids") if ids_path.suffix == ".json" else text.splitlines()
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as e:
        raise r.fail(data, "doc_ids", f"cannot read doc ids from {ids_path}: {e}") from None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise r.fail(data, "doc_ids", f"{ids_path}: expected a list of doc id strings")
    ids = [i.strip() for i in ids if i.strip()]
    if not ids or len(set(ids)) != len(ids):
        raise r.fail(data, "doc_ids", f"{ids_path}: doc ids must be non-empty and unique")
    return replace(
        base,
        task=r.get(data, "task", str),
        doc_ids=tuple(ids),
        group=r.str_list(data, "group", ()),
        description=r.get(data, "description", str, f"{base.task} on the {len(ids)} docs listed in {ids_path.name}"),
        source_file=str(path),
    )


def _parse_dataset(r: FieldReader, data: LineDict, path: Path) -> DatasetSpec:
    r.check_keys(data, DATASET_KEYS, "dataset")
    kinds = [k for k in ("path", "load_from_disk", "data_files", "builder") if k in data]
    if not kinds or (len(kinds) > 1 and set(kinds) != {"builder", "data_files"}):
        raise ConfigError(
            f"{r.path}:{data.line}: dataset needs exactly one source: path (hub id), load_from_disk, "
            f"data_files, or builder (+ data_files); got {kinds or 'none'}"
        )
    if "builder" in data and "data_files" not in data:
        raise ConfigError(f"{r.path}:{data.line}: dataset.builder needs data_files (relative to its output)")
    files = r.get(data, "data_files", (dict, str, list), None)
    if files is not None:
        files = {"train": files} if not isinstance(files, dict) else files
        files = {str(split): [f] if isinstance(f, str) else list(f) for split, f in files.items()}
    return DatasetSpec(
        path=r.get(data, "path", str, None),
        name=r.get(data, "name", str, None),
        revision=r.get(data, "revision", str, None),
        load_from_disk=r.get(data, "load_from_disk", str, None),
        data_files=files,
        image_root=r.get(data, "image_root", str, None),
        builder=r.get(data, "builder", str, None),
        allow_absolute_paths=r.get(data, "allow_absolute_paths", bool, False),
        base_dir=str((data.path_of(kinds[0]) or path).parent),  # relative paths are from the file that wrote them
    )


def _parse_generation(r: FieldReader, data: LineDict) -> GenerationSettings:
    if data:
        r.check_keys(data, GENERATION_KEYS, "generation")
    return GenerationSettings(
        max_new_tokens=r.get(data, "max_new_tokens", int, 64),
        temperature=float(r.get(data, "temperature", (int, float), 0.0)),
        top_p=float(r.get(data, "top_p", (int, float), 1.0)),
        stop=r.str_list(data, "stop", ()),
        seed=r.get(data, "seed", int, 0),
    )
