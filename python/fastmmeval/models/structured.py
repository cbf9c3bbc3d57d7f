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

from fastmmeval.models.base import Model
from fastmmeval.models.schema_subset import (
    DEFAULT_MAX_ITEMS,
    SchemaError,
    check_schema,
    in_range,
    integer_choices,
    range_text,
    schema_types,
    shown_path,
    written_type,
)
from fastmmeval.protocol import GenerationSettings, Message, Request, Response, TextPart

STRING_TOKENS = 128  # a string's tokens when its schema has no maxLength
NUMBER_TOKENS = 16
MORE, DONE = "another", "done"

WRITE = 'Write only the value of the field "{path}"{about}. Reply with {what} on one line, nothing else.'
CHOOSE = 'Choose the value of the field "{path}"{about}. Reply with one of: {options}.'
MORE_ITEMS = ('The list "{path}"{about} has {count} item(s) so far, at most {most}. Reply "another" to add '
              'one more item, or "done" to end the list.')

_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_INTEGER = re.compile(r"[-+]?\d+")


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
                return Response(request.id, error=f"field {shown_path(ask.path)!r}: {failure}", usage=dict(usage))
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
        kind = written_type(schema_types(schema, path))
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
        elif kind == "integer" and (choices := integer_choices(schema)):
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
        # Each option is scored followed by the end of its line: bare, "1" would always outscore "10",
        # since every reply that starts "10" starts "1".
        request = self._ask(CHOOSE.format(path=shown_path(path), about=_about(about), options=", ".join(texts)),
                            continuations=tuple(f"{t}\n" for t in texts))

        def take(responses: list[Response]) -> None:
            scores = responses[0].logprobs or []
            holder[key] = options[max(range(len(options)), key=scores.__getitem__)]  # the first on ties

        self.asks.append(_Ask(path, [request], take))

    def _string(self, schema: dict[str, Any], path: str, about: str, holder: Any, key: Any) -> None:
        most, least = schema.get("maxLength"), schema.get("minLength", 0)
        what = "plain text" + (f" of at most {most} characters" if most is not None else "")
        request = self._ask(WRITE.format(path=shown_path(path), about=_about(about), what=what),
                            STRING_TOKENS if most is None else most)

        def take(responses: list[Response]) -> str | None:
            text = _first_line(responses[0].text or "")[:most]
            if len(text) < least:
                return f"the reply {text!r} is shorter than its minLength {least}"
            holder[key] = text
            return None

        self.asks.append(_Ask(path, [request], take))

    def _number(self, schema: dict[str, Any], integer: bool, path: str, about: str, holder: Any, key: Any) -> None:
        bounds = range_text(schema)
        what = ("an integer" if integer else "a number") + (f" ({bounds})" if bounds else "")
        request = self._ask(WRITE.format(path=shown_path(path), about=_about(about), what=what), NUMBER_TOKENS)

        def take(responses: list[Response]) -> str | None:
            reply = responses[0].text or ""
            found = _NUMBER.search(reply)
            if found is None:
                return f"no number in the reply {reply[:80]!r}"
            value: int | float = int(found.group()) if _INTEGER.fullmatch(found.group()) else float(found.group())
            if not math.isfinite(value) or (integer and not float(value).is_integer()):
                return f"the reply's number {found.group()!r} is not {'an integer' if integer else 'finite'}"
            value = int(value) if integer else value
            if not in_range(value, schema):
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
        requests = [self._ask(MORE_ITEMS.format(path=shown_path(path), about=_about(about), count=count, most=most),
                              continuations=(MORE, DONE)) for count in range(least, most)]

        def take(responses: list[Response]) -> None:
            # The k-th answer is "has k items so far: another?": the list ends at the first "done".
            for response in responses:
                more, done = response.logprobs or (0.0, 0.0)
                if more <= done:
                    break
                add()

        self.asks.append(_Ask(path, requests, take))


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


def _about(about: str) -> str:
    return f" ({' '.join(about.split())})" if about else ""
