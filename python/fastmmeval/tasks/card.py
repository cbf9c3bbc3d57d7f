"""A task's protocol card: everything that decides its score, in one readable place."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fastmmeval.errors import ConfigError, FastmmevalError
from fastmmeval.extract.judge_assisted import JUDGE_ASSISTED
from fastmmeval.tasks.config import TaskConfig, ppl_messages
from fastmmeval.tasks.messages import InterleavedText
from fastmmeval.tasks.task import Task


def _template(config: TaskConfig) -> str:
    lines = []
    for turn in config.doc_to_messages:
        body = "".join(_part(kind, value) for kind, value in turn.parts)
        lines.append(f"[{turn.role}] {body}")
    return "\n".join(lines)


def _part(kind: str, value: str | InterleavedText) -> str:
    if isinstance(value, InterleavedText):
        return f"{value.template} (at each {value.pattern}: the image of {value.images!r} its group numbers)"
    return value if kind == "text" else f"<image:{value}>"


def _ppl(config: TaskConfig) -> dict[str, str]:
    """How a multiple-choice task is asked in ppl mode (its own mode or `--mc_mode ppl`)."""
    try:
        prompt = _template(replace(config, doc_to_messages=ppl_messages(config)))
    except ConfigError as e:
        prompt = f"none: {e}"
    return {"prompt": prompt, "headline": config.ppl.headline, "target_delimiter": config.ppl.target_delimiter}


def protocol_card(config: TaskConfig) -> dict[str, Any]:
    """The card of one task. Its data is loaded when it can be (hub cache, `--data_dir`, local
    files) to count the docs and render the first one; otherwise `data_error` says why not."""
    task = Task(config)
    d = config.dataset
    judges = {m.name: m.judge for m in task.metrics if m.judge}
    if task.metrics and config.extractor in JUDGE_ASSISTED:  # an unscored task's rules alone read answers
        judges["extract"] = JUDGE_ASSISTED[config.extractor]
    card: dict[str, Any] = {
        "task": config.task,
        "description": config.description,
        "groups": list(config.group),
        "dataset": d.path or d.load_from_disk or (f"builder:{d.builder}" if d.builder else "local files"),
        "dataset_config": d.name,
        "revision": d.revision,
        "split": config.split,
        "where": dict(config.where),
        "docs_expected": config.docs,
        "process_doc": config.process_doc,
        "prompt": _template(config),
        "output_type": config.output_type,
        "mc_mode": config.mc_mode,
        "ppl": _ppl(config) if config.output_type == "multiple_choice" else None,
        "extractor": config.extractor,
        "metrics": {m: k for m, k in zip(config.metrics, config.metric_keys or config.metrics, strict=True)},
        "submission": config.submission,
        "generation": {
            "max_new_tokens": config.generation.max_new_tokens,
            "temperature": config.generation.temperature,
            "top_p": config.generation.top_p,
            "stop": list(config.generation.stop),
        },
        "judge": judges or None,
        "protocol_fingerprint": config.fingerprint(),
        "lmms_eval_task": config.lmms_eval.task if config.lmms_eval else None,
        "differences_from_lmms_eval": dict(config.lmms_eval.differences) if config.lmms_eval else {},
        "notes_on_lmms_eval": list(config.lmms_eval.notes) if config.lmms_eval else [],
    }
    try:
        refs = task.doc_refs()
        card["docs"] = len(refs)
        card["fingerprint"] = task.fingerprint()
        if refs:
            doc = task.doc(refs[0])
            request = task.request(doc, seed=0)
            card["example"] = {
                "doc_id": doc.id,
                "messages": [f"[{m.role}] {m.text}" for m in request.messages],
                "target": task.targets(doc) if task.metrics else None,  # a submission split's are not public
            }
    except FastmmevalError as e:
        card["data_error"] = str(e)
    return card
