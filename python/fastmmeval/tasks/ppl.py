"""The ppl block of a task file: how a multiple-choice task is asked when each option's text is scored
by log-likelihood (`mc_mode: ppl`)."""

from __future__ import annotations

import string
from dataclasses import dataclass, replace
from typing import Literal

from fastmmeval.tasks.messages import InterleavedText, MessageTemplate, parse_messages
from fastmmeval.tasks.yaml_lines import FieldReader, LineDict

PPL_KEYS = {"doc_to_messages", "headline", "target_delimiter"}


@dataclass(frozen=True)
class PplSpec:
    """How a multiple-choice task is asked in ppl mode: its prompt (None: its own, cut after the `{options}`
    slot, see `cut_after_options`), the headline accuracy (`acc`: summed log-probability; `acc_norm`: per
    byte of the option text) and what goes before each option's text in its continuation (lmms-eval's and
    lm-evaluation-harness's `target_delimiter`)."""

    doc_to_messages: tuple[MessageTemplate, ...] | None = None
    headline: Literal["acc", "acc_norm"] = "acc"
    target_delimiter: str = ""


def parse_ppl(r: FieldReader, data: LineDict, output_type: str) -> PplSpec:
    """`ppl: {doc_to_messages, headline: acc|acc_norm, target_delimiter}`, each optional (see PplSpec)."""
    block = r.get(data, "ppl", dict, None)
    if block is None:
        return PplSpec()
    if output_type != "multiple_choice":
        raise r.fail(data, "ppl", "only multiple_choice tasks have a ppl block")
    r.check_keys(block, PPL_KEYS, "ppl")
    headline = r.get(block, "headline", str, PplSpec.headline)
    if headline not in ("acc", "acc_norm"):
        raise r.fail(block, "headline", f"must be acc or acc_norm, got {headline!r}")
    return PplSpec(
        doc_to_messages=parse_messages(r, block) if "doc_to_messages" in block else None,
        headline=headline,
        target_delimiter=r.get(block, "target_delimiter", str, PplSpec.target_delimiter),
    )


def cut_after_options(messages: tuple[MessageTemplate, ...]) -> tuple[MessageTemplate, ...] | None:
    """`messages` with each text part that holds the `{options}` slot cut right after the last one (the
    letter instruction a gen prompt puts there goes); None when no part holds the slot."""
    turns, cut = [], False
    for turn in messages:
        parts = []
        for kind, value in turn.parts:
            if kind == "text":
                kept = _up_to_options(value.template if isinstance(value, InterleavedText) else value)
                if kept is not None:
                    value = replace(value, template=kept) if isinstance(value, InterleavedText) else kept
                    cut = True
            parts.append((kind, value))
        turns.append(replace(turn, parts=tuple(parts)))
    return tuple(turns) if cut else None


def _up_to_options(template: str) -> str | None:
    """`template` up to and including its last `{options}` slot; None when it has none."""
    pieces = list(string.Formatter().parse(template))
    ends = [i for i, (_, name, _, _) in enumerate(pieces) if name == "options"]
    if not ends:
        return None
    out = []
    for literal, name, spec, conversion in pieces[: ends[-1] + 1]:
        out.append(literal.replace("{", "{{").replace("}", "}}"))
        if name is not None:
            out.append("{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}")
    return "".join(out)
