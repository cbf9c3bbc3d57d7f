"""The JSON schema subset a reply can be written in by `models.structured` (any backend) and the
bounds a server keeps: which keywords each type takes, how many value requests a schema may need,
and the small helpers both the check and the writer read a schema with."""

from __future__ import annotations

import json
import math
from typing import Any

from fastmmeval.errors import FastmmevalError

MAX_SCHEMA_CHARS = 32_768  # the schema as JSON text
MAX_DEPTH = 8  # objects and arrays nested in one another
MAX_VALUES = 256  # value requests the largest reply may need (every array at its most items)
MAX_OPTIONS = 64  # values of one enum
MAX_RANGE = 21  # integers in a range that are chosen among rather than generated
DEFAULT_MAX_ITEMS = 8  # an array's most items when its schema has no maxItems
_TEXTS = frozenset({"title", "description", "$schema", "$id", "$comment"})
ANNOTATIONS = _TEXTS | {"default", "examples"}
_BOUNDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
# The keywords each type takes besides type, enum, const and the annotations.
KEYWORDS: dict[str, frozenset[str]] = {
    "object": frozenset({"properties", "required", "additionalProperties"}),
    "array": frozenset({"items", "minItems", "maxItems"}),
    "string": frozenset({"minLength", "maxLength"}),
    "integer": _BOUNDS,
    "number": _BOUNDS,
    "boolean": frozenset(),
    "null": frozenset(),
}


class SchemaError(FastmmevalError):
    """A JSON schema outside the subset `answer_structured` writes, or over its bounds."""


def check_schema(schema: Any) -> None:
    """Refuse, with a SchemaError naming the field and keyword, a schema outside the subset: type
    object (properties, required, additionalProperties), array (items, minItems, maxItems), string
    (minLength, maxLength), integer and number (minimum, maximum, exclusiveMinimum,
    exclusiveMaximum), boolean and null (a list of types writes the first that is not null), enum,
    const and annotations (title, description, ...); or one over MAX_SCHEMA_CHARS of JSON, MAX_DEPTH
    levels of objects and arrays, or MAX_VALUES value requests."""
    try:
        size = len(json.dumps(schema, ensure_ascii=False, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        raise SchemaError("the schema is not JSON data") from None
    if size > MAX_SCHEMA_CHARS:
        raise SchemaError(f"the schema has {size} characters of JSON, over the limit of {MAX_SCHEMA_CHARS}")
    values = value_count(schema, "", 0)
    if values > MAX_VALUES:
        raise SchemaError(f"the reply could need {values} values (every array at its maxItems), over the limit of "
                          f"{MAX_VALUES}: lower maxItems or split the request")


def value_count(schema: Any, path: str, depth: int) -> int:
    """How many value requests `schema` may need at most; refuses what the subset does not hold."""
    where = shown_path(path)
    if not isinstance(schema, dict):
        raise SchemaError(f"{where}: a schema must be a JSON object, got {type(schema).__name__}")
    types = schema_types(schema, path)
    fixed = [keyword for keyword in ("const", "enum") if keyword in schema]
    allowed = ANNOTATIONS | {"type", *fixed[:1]} if fixed else ANNOTATIONS.union(
        {"type", "enum", "const"}, *(KEYWORDS[t] for t in types))
    for keyword in schema:
        if keyword not in allowed:
            beside = f" beside {fixed[0]}" if fixed else f" for type {'/'.join(types)}" if types else ""
            raise SchemaError(f"{where}: the keyword {keyword!r} is not supported{beside}")
    for keyword in _TEXTS & schema.keys():
        if not isinstance(schema[keyword], str):
            raise SchemaError(f"{where}: {keyword} must be a string, got {schema[keyword]!r:.60}")
    if not isinstance(schema.get("examples", []), list):
        raise SchemaError(f"{where}: examples must be a list")
    if "const" in schema:
        _check_value(schema["const"], types, f"{where}: const")
        return 0
    if "enum" in schema:
        options = schema["enum"]
        if not isinstance(options, list) or not 0 < len(options) <= MAX_OPTIONS:
            raise SchemaError(f"{where}: enum must be a list of 1 to {MAX_OPTIONS} values")
        for option in options:
            _check_value(option, types, f"{where}: enum")
        return int(len(options) > 1)
    if not types:
        raise SchemaError(f"{where}: a schema needs a type, an enum or a const")
    kind = written_type(types)
    if kind in ("object", "array") and depth >= MAX_DEPTH:
        raise SchemaError(f"{where}: objects and arrays are nested deeper than {MAX_DEPTH} levels")
    if kind == "object":
        return _object_values(schema, path, depth)
    if kind == "array":
        item = schema.get("items")
        if not isinstance(item, dict):
            raise SchemaError(f"{where}: an array needs its items' schema (an object) under 'items'")
        least = _count(schema, "minItems", where, 0)
        most = _count(schema, "maxItems", where, max(least, DEFAULT_MAX_ITEMS))
        if most < least:
            raise SchemaError(f"{where}: maxItems {most} is below minItems {least}")
        return most * value_count(item, f"{path}[]", depth + 1) + most - least
    if kind == "string":
        least, most = _count(schema, "minLength", where, 0), _count(schema, "maxLength", where, None)
        if most is not None and most < least:
            raise SchemaError(f"{where}: maxLength {most} is below minLength {least}")
        return 1
    if kind in ("integer", "number"):
        for bound in _BOUNDS & schema.keys():
            value = schema[bound]
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise SchemaError(f"{where}: {bound} must be a finite number, got {value!r}")
        low, high = int_bounds(schema) if kind == "integer" else (schema.get("minimum"), schema.get("maximum"))
        if low is not None and high is not None and low > high:
            raise SchemaError(f"{where}: no {kind} is in its range ({range_text(schema)})")
    return int(kind != "null")


def _object_values(schema: dict[str, Any], path: str, depth: int) -> int:
    where = shown_path(path)
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        raise SchemaError(f"{where}: properties must be an object of schemas")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(name, str) for name in required) \
            or len(set(required)) < len(required):
        raise SchemaError(f"{where}: required must be a list of distinct property names")
    if missing := [name for name in required if name not in properties]:
        raise SchemaError(f"{where}: required names {', '.join(map(repr, missing))}, not in its properties")
    if not isinstance(schema.get("additionalProperties", False), bool):
        raise SchemaError(f"{where}: additionalProperties must be true or false")
    return sum(value_count(sub, f"{path}.{name}" if path else name, depth + 1) for name, sub in properties.items())


def schema_types(schema: dict[str, Any], path: str) -> tuple[str, ...]:
    """The schema's listed types (none when it has no `type`)."""
    if "type" not in schema:
        return ()
    listed = schema["type"]
    types = (listed,) if isinstance(listed, str) else tuple(listed) if isinstance(listed, list) else ()
    if not types or not all(isinstance(t, str) and t in KEYWORDS for t in types) or len(set(types)) < len(types):
        raise SchemaError(f"{shown_path(path)}: type must be one of {', '.join(KEYWORDS)} or a list of distinct ones, "
                          f"got {listed!r}")
    return types


def written_type(types: tuple[str, ...]) -> str:
    """The type a value is written as: the first listed that is not null."""
    return next((t for t in types if t != "null"), "null")


def _count(schema: dict[str, Any], key: str, where: str, default: int | None) -> Any:
    value = schema.get(key, default)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise SchemaError(f"{where}: {key} must be a non-negative integer, got {value!r}")
    return value


def _check_value(value: Any, types: tuple[str, ...], where: str) -> None:
    if types and not any(is_type(value, t) for t in types):
        raise SchemaError(f"{where} value {value!r:.60} is not of type {'/'.join(types)}")


def is_type(value: Any, kind: str) -> bool:
    """Whether `value` is of JSON schema type `kind`."""
    if isinstance(value, bool):
        return kind == "boolean"
    if kind == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    kinds: dict[str, type | tuple[type, ...]] = {"number": (int, float), "string": str, "object": dict,
                                                 "array": list, "null": type(None), "boolean": bool}
    return isinstance(value, kinds[kind])


def int_bounds(schema: dict[str, Any]) -> tuple[int | None, int | None]:
    """The least and the greatest integer an integer schema's bounds admit (None: unbounded)."""
    lows = [math.ceil(schema["minimum"])] if "minimum" in schema else []
    lows += [math.floor(schema["exclusiveMinimum"]) + 1] if "exclusiveMinimum" in schema else []
    highs = [math.floor(schema["maximum"])] if "maximum" in schema else []
    highs += [math.ceil(schema["exclusiveMaximum"]) - 1] if "exclusiveMaximum" in schema else []
    return max(lows, default=None), min(highs, default=None)


def integer_choices(schema: dict[str, Any]) -> list[int]:
    """The integers an integer schema admits when its range is bounded and holds at most MAX_RANGE."""
    low, high = int_bounds(schema)
    return list(range(low, high + 1)) if low is not None and high is not None and high - low < MAX_RANGE else []


def in_range(value: float, schema: dict[str, Any]) -> bool:
    return (value >= schema.get("minimum", -math.inf) and value > schema.get("exclusiveMinimum", -math.inf)
            and value <= schema.get("maximum", math.inf) and value < schema.get("exclusiveMaximum", math.inf))


def range_text(schema: dict[str, Any]) -> str:
    words = {"minimum": "at least", "exclusiveMinimum": "greater than", "maximum": "at most",
             "exclusiveMaximum": "less than"}
    return " and ".join(f"{word} {schema[bound]}" for bound, word in words.items() if bound in schema)


def shown_path(path: str) -> str:
    """A field's path as the model and errors see it: the whole reply is `reply`."""
    return path if path and not path.startswith("[") else "reply" + path
