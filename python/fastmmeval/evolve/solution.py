"""A QA instance's solution plan π = (o_1, ..., o_K) as data (MMBench-Live, Section 3.3): the JSON
schema a generator writes it in, its check (every step names a registered tool with valid inputs, and an
"@k" input names an earlier step), and its run, z_k = T(o_k | x, z_<k), each tool's output text.

    steps = check_plan([{"tool": "region_colour", "inputs": [{"name": "region", "value": "top-left"}]},
                        {"tool": "count", "inputs": [{"name": "colour", "value": "@1"}]}], tools)
    run_plan(steps, image, tools)   # ['red is the dominant colour ...', '2 red objects in the whole image ...']
"""

from __future__ import annotations

import re
from typing import Any

from PIL import Image

from fastmmeval.errors import ConfigError, FastmmevalError
from fastmmeval.evolve.records import Step
from fastmmeval.evolve.tool_inputs import KINDS
from fastmmeval.evolve.tools import Tool, ToolBox

MAX_STEPS = 6
MAX_VALUE = 120  # characters of one input value
MAX_PURPOSE = 160
_KEYS = ("tool", "inputs", "purpose")
_REFERENCE = re.compile(r"@(\d+)")


class PlanError(FastmmevalError):
    """A solution plan that cannot be run as written, or a step that failed: one line naming the step."""


def plan_schema(tools: ToolBox) -> dict[str, Any]:
    """The JSON schema of a plan (a list of steps, each a tool, its inputs as name/value pairs and its
    purpose), inside the subset every backend can fill (models.schema_subset)."""
    params = [tools.get(name).params for name in tools.names]
    names = list(dict.fromkeys(name for p in params for name in p))
    value = {"type": "string", "maxLength": MAX_VALUE,
             "description": 'the input\'s value as text, or "@k" for the output of the earlier step k'}
    pair = {"type": "object", "required": ["name", "value"], "additionalProperties": False,
            "properties": {"name": {"enum": names} if names else {"type": "string"}, "value": value}}
    step = {"type": "object", "required": list(_KEYS), "additionalProperties": False, "properties": {
        "tool": {"enum": list(tools.names), "description": "the registered tool this step runs"},
        "inputs": {"type": "array", "maxItems": max(map(len, params), default=0), "items": pair,
                   "description": "the tool's inputs (the optional ones may be left out)"},
        "purpose": {"type": "string", "maxLength": MAX_PURPOSE, "description": "what this step finds out"}}}
    return {"type": "array", "minItems": 1, "maxItems": MAX_STEPS, "items": step,
            "description": "the solution plan: tool steps run in order, each returning text"}


def check_plan(raw: Any, tools: ToolBox) -> list[Step]:
    """The plan's steps, each checked: a registered tool, inputs (name/value pairs as the schema has them, or
    a name -> value object as Step.record() has them) that the tool takes, its required inputs given, each
    value of its input's kind or "@k" for an earlier step k. A PlanError names the first step at fault."""
    if not isinstance(raw, list):
        raise PlanError(f"the plan must be a list of steps, got {type(raw).__name__}")
    if not 1 <= len(raw) <= MAX_STEPS:
        raise PlanError(f"the plan has {len(raw)} steps: it needs 1 to {MAX_STEPS}")
    return [_check_step(k, item, tools) for k, item in enumerate(raw, 1)]


def run_plan(steps: list[Step], image: Image.Image, tools: ToolBox) -> list[str]:
    """Each step's tool run on `image`, in order, with "@k" inputs taken from step k's output: the outputs
    z_1..z_K. A plan that does not check, or a step whose tool fails, raises a PlanError naming the step;
    a tool whose weights cannot load raises ConfigError."""
    steps = check_plan([step.record() for step in steps], tools)
    image = image.convert("RGB")
    outputs: list[str] = []
    for k, step in enumerate(steps, 1):
        tool = tools.get(step.tool)
        args = {name: _value(k, name, step.inputs.get(name, param.default), param.kind, outputs)
                for name, param in tool.params.items()}
        try:
            outputs.append(tool.run(image, args, list(outputs)))
        except ConfigError:
            raise
        except Exception as e:  # a tool's library failing on this image fails this plan, not the run
            raise PlanError(f"step {k} ({tool.name}) failed: {type(e).__name__}: {e}") from None
    return outputs


def _check_step(k: int, item: Any, tools: ToolBox) -> Step:
    where = f"step {k}"
    if not isinstance(item, dict):
        raise PlanError(f"{where}: a step must be an object with {', '.join(_KEYS)}, got {type(item).__name__}")
    if extra := [key for key in item if key not in _KEYS]:
        raise PlanError(f"{where}: unknown key {extra[0]!r} (a step has {', '.join(_KEYS)})")
    name, purpose = item.get("tool"), item.get("purpose", "")
    if not isinstance(name, str) or not name:
        raise PlanError(f"{where}: no tool named (tool must be one of: {', '.join(tools.names)})")
    if name not in tools.names:
        raise PlanError(f"{where}: {tools.why_not(name)}")
    if not isinstance(purpose, str):
        raise PlanError(f"{where}: purpose must be text, got {type(purpose).__name__}")
    tool = tools.get(name)
    inputs = _inputs(where, item.get("inputs", []))
    for input_name in inputs:
        if input_name not in tool.params:
            takes = f"its inputs: {', '.join(tool.params)}" if tool.params else "it takes no inputs"
            raise PlanError(f"{where}: tool {name!r} has no input {input_name!r} ({takes})")
    for input_name, param in tool.params.items():
        if param.required and input_name not in inputs:
            raise PlanError(f"{where}: tool {name!r} needs input {input_name!r} ({param.description})")
    for input_name, value in inputs.items():
        _check_value(k, input_name, value, tool)
    return Step(name, inputs, purpose.strip())


def _inputs(where: str, raw: Any) -> dict[str, str]:
    pairs: list[tuple[Any, Any]]
    if isinstance(raw, dict):
        pairs = list(raw.items())
    elif isinstance(raw, list) and all(isinstance(p, dict) and set(p) == {"name", "value"} for p in raw):
        pairs = [(p["name"], p["value"]) for p in raw]
    else:
        raise PlanError(f"{where}: inputs must be a list of {{name, value}} pairs")
    inputs: dict[str, str] = {}
    for name, value in pairs:
        if not isinstance(name, str) or not isinstance(value, str):
            raise PlanError(f"{where}: an input's name and value must be text, got {name!r}: {value!r}")
        if name in inputs:
            raise PlanError(f"{where}: input {name!r} is given twice")
        if len(value) > MAX_VALUE:
            raise PlanError(f"{where}: {name}: the value has {len(value)} characters, at most {MAX_VALUE}")
        inputs[name] = value.strip()
    return inputs


def _check_value(k: int, name: str, value: str, tool: Tool) -> None:
    where = f"step {k}: {name}"
    if value.startswith("@"):
        found = _REFERENCE.fullmatch(value)
        if not found:
            raise PlanError(f"{where}: {value!r} is not a reference to an earlier step (@1, @2, ...)")
        earlier = int(found.group(1))
        if earlier == 0:
            raise PlanError(f"{where}: input {value} is not a step (steps are numbered from 1)")
        if earlier >= k:
            raise PlanError(f"{where}: input {value} names {'the step itself' if earlier == k else 'a later step'}")
        if KINDS[tool.params[name].kind].find is None:
            raise PlanError(f"{where}: a {tool.params[name].kind} input is written out, never taken from an "
                            f"earlier step ({value})")
        return
    try:
        tool.params[name].parse(value)
    except ValueError as e:
        raise PlanError(f"{where}: {e}") from None


def _value(k: int, name: str, text: str | None, kind: str, outputs: list[str]) -> Any:
    """An input's value for the tool: parsed from its text, or found in an earlier output for "@k"."""
    if text is None:
        return None
    if found := _REFERENCE.fullmatch(text):
        earlier = int(found.group(1))
        find = KINDS[kind].find
        picked = find(outputs[earlier - 1]) if find else None
        if picked is None:
            raise PlanError(f"step {k}: {name}: the output of step {earlier} holds no {kind} "
                            f"({outputs[earlier - 1][:80]!r})")
        text = picked
    try:
        return KINDS[kind].parse(text)
    except ValueError as e:
        raise PlanError(f"step {k}: {name}: from step {found.group(1)}'s output, {e}" if found else
                        f"step {k}: {name}: {e}") from None
