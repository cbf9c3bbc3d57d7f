"""Replies in a given JSON shape from any backend: the structure is written here, only the values
come from the model.

`answer_structured` walks the request's JSON schema (the subset `check_schema` accepts) and writes
the JSON itself, so braces, keys, commas and quotes never come from the model. Each value is one
request to the backend: the request's own messages, with an instruction naming the field (its path,
e.g. `questions[1].answer`, and its description) added to the last user turn.

- A string is generated (greedy): the first non-empty line of the reply, cut to `maxLength`.
- An `enum`, a boolean, or an integer whose range holds at most `MAX_RANGE` values is chosen by
  loglikelihood among its options (the summed log-probability of each option's text); a `const`, or
  an enum of one, costs no request.
- Any other integer or number is generated: the first number in the reply. A reply without one, or
  one out of the schema's range, fails the whole answer: it is never clamped.
- An array has `minItems` items, then one more for each time "another" scores above "done", up to
  `maxItems` (`DEFAULT_MAX_ITEMS` when the schema sets none).

No value depends on another, so the requests go to the backend in rounds, each one generate and one
loglikelihood call: the first round asks every value whose place is known, and a further round is
needed only for the items of arrays whose length the previous round chose.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from fastmmeval.errors import FastmmevalError
from fastmmeval.models.base import Model
from fastmmeval.protocol import GenerationSettings, Message, Request, Response, TextPart

MAX_SCHEMA_CHARS = 32_768  # the schema as JSON text
MAX_DEPTH = 8  # objects and arrays nested in one another
MAX_VALUES = 256  # value requests the largest reply may need (every array at its most items)
MAX_OPTIONS = 64  # values of one enum
MAX_RANGE = 21  # integers in a range that are chosen among rather than generated
DEFAULT_MAX_ITEMS = 8  # an array's most items when its schema has no maxItems
STRING_TOKENS = 128  # a string's tokens when its schema has no maxLength
NUMBER_TOKENS = 16
MORE, DONE = "another", "done"

WRITE = 'Write only the value of the field "{path}"{about}. Reply with {what} on one line, nothing else.'
CHOOSE = 'Choose the value of the field "{path}"{about}. Reply with one of: {options}.'
MORE_ITEMS = ('The list "{path}"{about} has {count} item(s) so far, at most {most}. Reply "another" to add '
              'one more item, or "done" to end the list.')

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
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_INTEGER = re.compile(r"[-+]?\d+")


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
    values = _values(schema, "", 0)
    if values > MAX_VALUES:
        raise SchemaError(f"the reply could need {values} values (every array at its maxItems), over the limit of "
                          f"{MAX_VALUES}: lower maxItems or split the request")


def answer_structured(model: Model, request: Request) -> Response:
    """A reply to `request` whose text is JSON valid for its `json_schema`, or an error naming the
    field that failed; made of `model`'s own generate and loglikelihood calls, at most one of each
    per round (see the module's docstring). Raises SchemaError for a schema `check_schema` refuses."""
    rounds = structured_rounds(request)
    responses: list[Response] | None = None
    try:
        while True:
            responses = model.answer_batch(rounds.send(responses))
    except StopIteration as done:
        return done.value


def structured_rounds(request: Request) -> Generator[list[Request], list[Response] | None, Response]:
    """The value requests that answer `request`, a round at a time: each yield is a round's requests,
    to be sent back their Responses in order; the return value is the reply (see answer_structured)."""
    try:
        schema = json.loads(request.json_schema or "")
    except ValueError:
        raise SchemaError(f"request {request.id}: json_schema is not JSON text") from None
    check_schema(schema)
    writer = _Writer(request)
    writer.place(schema, "", "", writer.root, 0)
    usage: Counter[str] = Counter()
    while writer.asks:
        asks, writer.asks = writer.asks, []
        responses = (yield [r for ask in asks for r in ask.requests]) or []
        for response in responses:
            usage.update(response.usage)
        answers = iter(responses)
        for ask in asks:
            mine = [next(answers) for _ in ask.requests]
            failure = next((why for why in map(_unanswered, ask.requests, mine) if why), None) or ask.take(mine)
            if failure is not None:
                return Response(request.id, error=f"field {_shown(ask.path)!r}: {failure}", usage=dict(usage))
    return Response(request.id, text=json.dumps(writer.root[0], ensure_ascii=False), usage=dict(usage))


@dataclass
class _Ask:
    """The requests for one value (or one array's length) and what to do with their Responses:
    `take` writes the value, or returns why it cannot."""

    path: str
    requests: list[Request]
    take: Callable[[list[Response]], str | None]


class _Writer:
    """The reply as a tree of values, filled in as its value requests are answered."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.root: list[Any] = [None]
        self.asks: list[_Ask] = []
        self._ids = itertools.count()

    def place(self, schema: dict[str, Any], path: str, about: str, holder: Any, key: Any) -> None:
        """Write `schema`'s value at `holder[key]` now, or ask for it in the coming round; `about` is
        the enclosing array's description, for items that have none."""
        about = schema.get("description") or schema.get("title") or about
        if "const" in schema:
            holder[key] = schema["const"]
            return
        if "enum" in schema:
            self._choose(path, about, list(schema["enum"]), holder, key)
            return
        kind = _written(_types(schema, path))
        if kind == "object":
            holder[key] = fields = {}
            for name, sub in schema.get("properties", {}).items():
                fields[name] = None
                self.place(sub, f"{path}.{name}" if path else name, "", fields, name)
        elif kind == "array":
            holder[key] = []
            self._array(schema, path, about, holder[key])
        elif kind == "boolean":
            self._choose(path, about, [True, False], holder, key)
        elif kind == "null":
            holder[key] = None
        elif kind == "string":
            self._string(schema, path, about, holder, key)
        elif kind == "integer" and (choices := _integer_choices(schema)):
            self._choose(path, about, choices, holder, key)
        else:
            self._number(schema, kind == "integer", path, about, holder, key)

    def _ask(self, instruction: str, max_new_tokens: int = 0, continuations: tuple[str, ...] = ()) -> Request:
        """A value request: the request's messages with `instruction` after them, decoded greedily."""
        own = self.request
        settings = GenerationSettings(max_new_tokens=min(max_new_tokens, own.generation.max_new_tokens),
                                      temperature=0.0, seed=own.generation.seed)
        return Request(f"{own.id}/{next(self._ids)}", "loglikelihood" if continuations else "generate",
                       _with_instruction(own.messages, instruction), settings, continuations)

    def _choose(self, path: str, about: str, options: list[Any], holder: Any, key: Any) -> None:
        if len(options) == 1:
            holder[key] = options[0]
            return
        texts = tuple(_option_text(o) for o in options)
        request = self._ask(CHOOSE.format(path=_shown(path), about=_about(about), options=", ".join(texts)),
                            continuations=texts)

        def take(responses: list[Response]) -> None:
            scores = responses[0].logprobs or []
            holder[key] = options[max(range(len(options)), key=scores.__getitem__)]  # the first on ties

        self.asks.append(_Ask(path, [request], take))

    def _string(self, schema: dict[str, Any], path: str, about: str, holder: Any, key: Any) -> None:
        most, least = schema.get("maxLength"), schema.get("minLength", 0)
        what = "plain text" + (f" of at most {most} characters" if most is not None else "")
        request = self._ask(WRITE.format(path=_shown(path), about=_about(about), what=what),
                            STRING_TOKENS if most is None else most)

        def take(responses: list[Response]) -> str | None:
            text = _first_line(responses[0].text or "")[:most]
            if len(text) < least:
                return f"the reply {text!r} is shorter than its minLength {least}"
            holder[key] = text
            return None

        self.asks.append(_Ask(path, [request], take))

    def _number(self, schema: dict[str, Any], integer: bool, path: str, about: str, holder: Any, key: Any) -> None:
        bounds = _range_text(schema)
        what = ("an integer" if integer else "a number") + (f" ({bounds})" if bounds else "")
        request = self._ask(WRITE.format(path=_shown(path), about=_about(about), what=what), NUMBER_TOKENS)

        def take(responses: list[Response]) -> str | None:
            reply = responses[0].text or ""
            found = _NUMBER.search(reply)
            if found is None:
                return f"no number in the reply {reply[:80]!r}"
            value: int | float = int(found.group()) if _INTEGER.fullmatch(found.group()) else float(found.group())
            if not math.isfinite(value) or (integer and not float(value).is_integer()):
                return f"the reply's number {found.group()!r} is not {'an integer' if integer else 'finite'}"
            value = int(value) if integer else value
            if not _in_range(value, schema):
                return f"the reply's number {value} is out of its range ({bounds})"
            holder[key] = value
            return None

        self.asks.append(_Ask(path, [request], take))

    def _array(self, schema: dict[str, Any], path: str, about: str, items: list[Any]) -> None:
        item, least = schema["items"], schema.get("minItems", 0)
        most = schema.get("maxItems", max(least, DEFAULT_MAX_ITEMS))

        def add() -> None:
            items.append(None)
            self.place(item, f"{path}[{len(items) - 1}]", about, items, len(items) - 1)

        for _ in range(least):
            add()
        if most == least:
            return
        requests = [self._ask(MORE_ITEMS.format(path=_shown(path), about=_about(about), count=count, most=most),
                              continuations=(MORE, DONE)) for count in range(least, most)]

        def take(responses: list[Response]) -> None:
            # The k-th answer is "has k items so far: another?": the list ends at the first "done".
            for response in responses:
                more, done = response.logprobs or (0.0, 0.0)
                if more <= done:
                    break
                add()

        self.asks.append(_Ask(path, requests, take))


def _values(schema: Any, path: str, depth: int) -> int:
    """How many value requests `schema` may need at most; refuses what the subset does not hold."""
    where = _shown(path)
    if not isinstance(schema, dict):
        raise SchemaError(f"{where}: a schema must be a JSON object, got {type(schema).__name__}")
    types = _types(schema, path)
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
    kind = _written(types)
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
        return most * _values(item, f"{path}[]", depth + 1) + most - least
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
        low, high = _int_bounds(schema) if kind == "integer" else (schema.get("minimum"), schema.get("maximum"))
        if low is not None and high is not None and low > high:
            raise SchemaError(f"{where}: no {kind} is in its range ({_range_text(schema)})")
    return int(kind != "null")


def _object_values(schema: dict[str, Any], path: str, depth: int) -> int:
    where = _shown(path)
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
    return sum(_values(sub, f"{path}.{name}" if path else name, depth + 1) for name, sub in properties.items())


def _types(schema: dict[str, Any], path: str) -> tuple[str, ...]:
    """The schema's listed types (none when it has no `type`)."""
    if "type" not in schema:
        return ()
    listed = schema["type"]
    types = (listed,) if isinstance(listed, str) else tuple(listed) if isinstance(listed, list) else ()
    if not types or not all(isinstance(t, str) and t in KEYWORDS for t in types) or len(set(types)) < len(types):
        raise SchemaError(f"{_shown(path)}: type must be one of {', '.join(KEYWORDS)} or a list of distinct ones, "
                          f"got {listed!r}")
    return types


def _written(types: tuple[str, ...]) -> str:
    """The type a value is written as: the first listed that is not null."""
    return next((t for t in types if t != "null"), "null")


def _count(schema: dict[str, Any], key: str, where: str, default: int | None) -> Any:
    value = schema.get(key, default)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise SchemaError(f"{where}: {key} must be a non-negative integer, got {value!r}")
    return value


def _check_value(value: Any, types: tuple[str, ...], where: str) -> None:
    if types and not any(_is_type(value, t) for t in types):
        raise SchemaError(f"{where} value {value!r:.60} is not of type {'/'.join(types)}")


def _is_type(value: Any, kind: str) -> bool:
    """Whether `value` is of JSON schema type `kind`."""
    if isinstance(value, bool):
        return kind == "boolean"
    if kind == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    kinds: dict[str, type | tuple[type, ...]] = {"number": (int, float), "string": str, "object": dict,
                                                 "array": list, "null": type(None), "boolean": bool}
    return isinstance(value, kinds[kind])


def _int_bounds(schema: dict[str, Any]) -> tuple[int | None, int | None]:
    """The least and the greatest integer an integer schema's bounds admit (None: unbounded)."""
    lows = [math.ceil(schema["minimum"])] if "minimum" in schema else []
    lows += [math.floor(schema["exclusiveMinimum"]) + 1] if "exclusiveMinimum" in schema else []
    highs = [math.floor(schema["maximum"])] if "maximum" in schema else []
    highs += [math.ceil(schema["exclusiveMaximum"]) - 1] if "exclusiveMaximum" in schema else []
    return max(lows, default=None), min(highs, default=None)


def _integer_choices(schema: dict[str, Any]) -> list[int]:
    """The integers an integer schema admits when its range is bounded and holds at most MAX_RANGE."""
    low, high = _int_bounds(schema)
    return list(range(low, high + 1)) if low is not None and high is not None and high - low < MAX_RANGE else []


def _in_range(value: float, schema: dict[str, Any]) -> bool:
    return (value >= schema.get("minimum", -math.inf) and value > schema.get("exclusiveMinimum", -math.inf)
            and value <= schema.get("maximum", math.inf) and value < schema.get("exclusiveMaximum", math.inf))


def _range_text(schema: dict[str, Any]) -> str:
    words = {"minimum": "at least", "exclusiveMinimum": "greater than", "maximum": "at most",
             "exclusiveMaximum": "less than"}
    return " and ".join(f"{word} {schema[bound]}" for bound, word in words.items() if bound in schema)


def _with_instruction(messages: tuple[Message, ...], instruction: str) -> tuple[Message, ...]:
    """`messages` with `instruction` at the end of the last user turn (a new user turn when the chat
    ends otherwise): chat templates that require roles to alternate accept it."""
    last = messages[-1] if messages else None
    if last is not None and last.role == "user":
        return (*messages[:-1], Message("user", (*last.content, TextPart("\n\n" + instruction))))
    return (*messages, Message("user", (TextPart(instruction),)))


def _first_line(text: str) -> str:
    """The first non-empty line of a reply, stripped, without a pair of double quotes around it."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line[1:-1].strip() if len(line) >= 2 and line[0] == line[-1] == '"' else line


def _option_text(option: Any) -> str:
    """How an option is written for the model to score: a non-blank string as itself, else as JSON."""
    return option if isinstance(option, str) and option.strip() else json.dumps(option, ensure_ascii=False)


def _unanswered(request: Request, response: Response) -> str | None:
    """Why `response` is no answer to the value request `request`, if it is none."""
    if response.error is not None:
        return response.error
    if request.kind == "generate":
        return None if response.text is not None else "the backend returned no text"
    if response.logprobs is None or len(response.logprobs) != len(request.continuations):
        return f"the backend did not score the {len(request.continuations)} options"
    return None


def _shown(path: str) -> str:
    """A field's path as the model and errors see it: the whole reply is `reply`."""
    return path if path and not path.startswith("[") else "reply" + path


def _about(about: str) -> str:
    return f" ({' '.join(about.split())})" if about else ""
