"""Replies in a JSON schema from any backend (`fastmmeval.models.structured`): the structure is ours,
each value is one of the backend's own generate or loglikelihood requests."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from fastmmeval.models import MODELS
from fastmmeval.models.base import Model
from fastmmeval.models.schema_subset import MAX_VALUES, SchemaError, check_schema
from fastmmeval.models.structured import answer_structured
from fastmmeval.protocol import GenerationSettings, ImagePart, Message, Request, Response, TextPart
from fastmmeval.serve.app import start_server
from fastmmeval.testing.echo_model import NoArgs

KEY_ENV = "FMM_STRUCTURED_KEY"
ASK = (Message("user", (TextPart("Tell me about the page."),)),)

# Every kind of the subset: a capped string, an enum, a const, a boolean, a small integer range, and an
# array (1 to 3 items) of objects holding an array of their own.
EVERY_KIND = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "description": "the page's title", "maxLength": 30},
        "subtask": {"enum": ["Concrete Recognition", "Analytical Understanding", "Divergent Thinking"]},
        "version": {"const": 2},
        "answerable": {"type": "boolean"},
        "rating": {"type": "integer", "minimum": 0, "maximum": 10},
        "questions": {
            "type": "array", "minItems": 1, "maxItems": 3, "description": "questions about the page",
            "items": {"type": "object", "required": ["question", "tags"], "properties": {
                "question": {"type": "string", "maxLength": 40},
                "tags": {"type": "array", "maxItems": 2, "items": {"type": "string", "maxLength": 10}}}},
        },
    },
    "required": ["title", "subtask", "questions"],
    "additionalProperties": False,
}


def structured(schema: dict[str, Any], messages: tuple[Message, ...] = ASK, max_new_tokens: int = 24) -> Request:
    return Request("ask", "generate", messages, GenerationSettings(max_new_tokens=max_new_tokens),
                   json_schema=json.dumps(schema))


def _field(request: Request) -> str:
    return re.search(r'(?:field|list) "([^"]+)"', request.messages[-1].text).group(1)


class Scripted(Model):
    """Answers by field: `texts[path]` is a generated value's reply; `picks[path]` the option scored best
    (the first when absent), or for a list how many items it gets. Records every call."""

    name = "scripted"
    Args = NoArgs

    def __init__(self, texts: dict[str, str] | None = None, picks: dict[str, Any] | None = None) -> None:
        self.texts, self.picks = texts or {}, picks or {}
        self.calls: list[tuple[str, list[Request]]] = []

    def generate(self, requests: list[Request]) -> list[Response]:
        self.calls.append(("generate", requests))
        return [Response(r.id, text=self.texts.get(_field(r), "plain words"), usage={"completion_tokens": 2})
                for r in requests]

    def loglikelihood(self, requests: list[Request]) -> list[Response]:
        self.calls.append(("loglikelihood", requests))
        out = []
        for r in requests:
            pick = self.picks.get(_field(r))
            options = [c.removesuffix("\n") for c in r.continuations]  # each scored with its line's end
            if options == ["another", "done"]:
                so_far = int(re.search(r"has (\d+) item", r.messages[-1].text).group(1))
                pick = "another" if so_far < (pick or 0) else "done"
            scores = [0.0 if option == pick else -1.0 - i for i, option in enumerate(options)]
            out.append(Response(r.id, logprobs=scores, is_greedy=[s == 0.0 for s in scores]))
        return out

    def fingerprint(self) -> dict[str, Any]:
        return {"model": self.name}


def _nested(levels: int) -> dict[str, Any]:
    """Arrays of one item in one another, `levels` deep."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "array", "maxItems": 1, "items": schema}
    return schema


def _image(seed: int) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (24, 32, 3), dtype=np.uint8))


@pytest.fixture(scope="module")
def tiny_hf(tiny_lm_dir: Path) -> Model:
    return MODELS.get("hf").from_args({"pretrained": str(tiny_lm_dir), "max_batch_size": "8"})


def test_every_kind_from_a_tiny_model_is_valid_json_in_a_few_calls(tiny_hf: Model,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    for kind in ("generate", "loglikelihood"):
        method = getattr(tiny_hf, kind)
        monkeypatch.setattr(tiny_hf, kind, lambda requests, method=method, kind=kind: (calls.append(kind),
                                                                                        method(requests))[1])
    reply = answer_structured(tiny_hf, structured(EVERY_KIND))
    assert reply.error is None and reply.usage["completion_tokens"] > 0
    value = json.loads(reply.text)
    jsonschema.validate(value, EVERY_KIND)
    assert list(value) == list(EVERY_KIND["properties"]) and value["version"] == 2
    # Rounds: the values whose place is known, then those of the items the first round added, then
    # those of their tags: one generate and one loglikelihood call each at most.
    assert len(calls) <= 6 and calls.count("loglikelihood") <= 3
    assert answer_structured(tiny_hf, structured(EVERY_KIND)).text == reply.text  # greedy: the same again


def test_values_are_the_models_and_the_structure_ours() -> None:
    model = Scripted(texts={"title": '  \n"The Bridge Opens Today Over The River"\nmore',
                            "questions[0].question": "Why?", "questions[1].question": 'Who said "no"?',
                            "questions[0].tags[0]": "news",
                            "questions[1].tags[0]": "x", "questions[1].tags[1]": "y"},
                     picks={"subtask": "Analytical Understanding", "answerable": "false", "rating": "7",
                            "questions": 2, "questions[0].tags": 1, "questions[1].tags": 2})
    reply = answer_structured(model, structured(EVERY_KIND))
    assert json.loads(reply.text) == {
        "title": "The Bridge Opens Today Over Th",  # first non-empty line, unquoted, cut to maxLength 30
        "subtask": "Analytical Understanding", "version": 2, "answerable": False, "rating": 7,
        "questions": [{"question": "Why?", "tags": ["news"]}, {"question": 'Who said "no"?', "tags": ["x", "y"]}]}
    kinds = [(kind, len(requests)) for kind, requests in model.calls]
    # Round 1: title and the first question; subtask, answerable, rating, 2 "another?" for questions and 2 for
    # the first question's tags. Round 2: its tag, the second question, 2 "another?" for its tags. Round 3: those.
    assert kinds == [("generate", 2), ("loglikelihood", 7), ("generate", 2), ("loglikelihood", 2),
                     ("generate", 2)]
    assert reply.usage == {"completion_tokens": 12}


def test_each_value_request_is_the_chat_with_an_instruction_naming_the_field() -> None:
    model = Scripted(texts={"caption": "a cat"})
    cat = _image(0)
    chat = (Message("system", (TextPart("Be brief."),)), Message("user", (ImagePart(cat), TextPart("Describe it."))))
    schema = {"type": "object", "properties": {"caption": {"type": "string", "description": "what the photo shows"},
                                               "kind": {"enum": ["photo", "drawing"]}}}
    reply = answer_structured(model, structured(schema, chat, max_new_tokens=50))
    assert json.loads(reply.text) == {"caption": "a cat", "kind": "photo"}
    [(_, [generated]), (_, [chosen])] = model.calls
    assert generated.messages[:1] == chat[:1] and generated.images == [cat]
    assert generated.messages[1].text == ('<image>Describe it.\n\nWrite only the value of the field "caption" (what '
                                          'the photo shows). Reply with plain text on one line, nothing else.')
    assert generated.generation.temperature == 0.0 and generated.generation.max_new_tokens == 50
    assert chosen.kind == "loglikelihood" and chosen.continuations == ("photo\n", "drawing\n")
    # A chat that does not end with the user gets the instruction as a user turn of its own.
    answer_structured(model, structured(schema, (*chat, Message("assistant", (TextPart("Sure."),)))))
    assert model.calls[-1][1][0].messages[-1].role == "user" and len(model.calls[-1][1][0].messages) == 4


@pytest.mark.parametrize(("schema", "reply", "expected"), [
    ({"type": "integer", "minimum": 0, "maximum": 100}, "It is 42 points.", 42),
    ({"type": "number", "exclusiveMinimum": 0}, "2.5", 2.5),
    ({"type": "integer", "minimum": 0, "maximum": 100}, "120", "the reply's number 120 is out of its range"),
    ({"type": "number", "exclusiveMinimum": 0}, "0", "the reply's number 0 is out of its range"),
    ({"type": "integer"}, "2.5", "the reply's number '2.5' is not an integer"),
    ({"type": "number"}, "many", "no number in the reply 'many'"),
    ({"type": "string", "minLength": 5}, "\n\n", "the reply '' is shorter than its minLength 5"),
])
def test_generated_numbers_are_checked_never_clamped(schema: dict[str, Any], reply: str, expected: Any) -> None:
    answer = answer_structured(Scripted(texts={"reply": reply}), structured(schema))
    if isinstance(expected, str):
        assert answer.text is None and answer.error.startswith(f"field 'reply': {expected}")
    else:
        assert json.loads(answer.text) == expected


def test_a_failed_value_request_fails_the_reply_naming_the_field() -> None:
    class Failing(Scripted):
        def generate(self, requests: list[Request]) -> list[Response]:
            return [Response(r.id, error="generation failed: CUDA out of memory") for r in requests]

    schema = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}}}}
    reply = answer_structured(Failing(), structured(schema))
    assert reply.text is None and reply.error == "field 'a.b': generation failed: CUDA out of memory"


@pytest.mark.parametrize(("schema", "message"), [
    ({"oneOf": [{"type": "string"}]}, "reply: the keyword 'oneOf' is not supported"),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}}, "a: the keyword '$ref' is not supported"),
    ({"type": "object", "patternProperties": {"x": {}}}, "'patternProperties' is not supported for type object"),
    ({"type": "string", "pattern": r"\S"}, "'pattern' is not supported for type string"),
    ({"type": "array", "items": [{"type": "string"}]}, "reply: an array needs its items' schema"),
    ({"type": "array", "items": {"type": "string"}, "maxItems": 1000}, f"over the limit of {MAX_VALUES}"),
    ({"type": "object", "properties": {"a": {}}}, "a: a schema needs a type, an enum or a const"),
    ({"type": "object", "properties": {}, "required": ["a"]}, "required names 'a', not in its properties"),
    ({"type": "integer", "minimum": 5, "maximum": 1}, "no integer is in its range"),
    ({"type": "integer", "enum": [1, "two"]}, "enum value 'two' is not of type integer"),
    ({"type": "tuple"}, "type must be one of object, array"),
    (_nested(9), "reply[][][][][][][][]: objects and arrays are nested deeper than 8 levels"),
])
def test_schemas_outside_the_subset_are_refused_with_one_line(schema: dict[str, Any], message: str) -> None:
    with pytest.raises(SchemaError, match=re.escape(message)):
        check_schema(schema)
    with pytest.raises(SchemaError, match=re.escape(message)):
        answer_structured(Scripted(), structured(schema))


def test_a_list_of_types_writes_the_first_that_is_not_null() -> None:
    schema = {"type": "object", "properties": {"grade": {"type": ["null", "number", "string"]}}}
    reply = answer_structured(Scripted(texts={"grade": "4"}), structured(schema))
    assert json.loads(reply.text) == {"grade": 4}


KEYWORD_NAMES = st.sampled_from(["type", "properties", "items", "enum", "const", "required", "minItems", "maxItems",
                                  "minimum", "maximum", "maxLength", "oneOf", "description", "x"])
ANY_JSON = st.recursive(st.none() | st.booleans() | st.integers(-5, 5)
                        | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=4)
                        | st.sampled_from(["object", "array", "string", "integer", "number", "boolean", "null"]),
                        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYWORD_NAMES, inner, max_size=4),
                        max_leaves=12)
SCALARS = st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=5)
VALUE_SCHEMAS = st.one_of(
    st.fixed_dictionaries({"type": st.just("string")}, optional={"maxLength": st.integers(0, 8),
                                                                 "description": st.text(max_size=8)}),
    st.builds(lambda options: {"enum": options}, st.lists(SCALARS, min_size=1, max_size=4)),
    st.builds(lambda value: {"const": value}, ANY_JSON),
    st.sampled_from([{"type": "boolean"}, {"type": "null"}, {"type": ["null", "integer"]},
                     {"type": "integer", "minimum": -100, "maximum": 100}, {"type": "number", "exclusiveMinimum": 0}]),
    st.builds(lambda low, span: {"type": "integer", "minimum": low, "maximum": low + span},
              st.integers(-5, 3), st.integers(0, 25)))  # 3 is in every range too wide to choose among
SCHEMAS = st.recursive(VALUE_SCHEMAS, lambda inner: st.one_of(
    st.builds(lambda properties: {"type": "object", "properties": properties, "required": sorted(properties)[:1]},
              st.dictionaries(st.text(min_size=1, max_size=4), inner, max_size=3)),
    st.builds(lambda item, least, more: {"type": "array", "items": item, "minItems": least, "maxItems": least + more},
              inner, st.integers(0, 2), st.integers(0, 2))), max_leaves=8)


class Seeded(Model):
    """Every generated value is '3'; options score at random (seeded)."""

    name = "seeded"
    Args = NoArgs

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def generate(self, requests: list[Request]) -> list[Response]:
        return [Response(r.id, text="3") for r in requests]

    def loglikelihood(self, requests: list[Request]) -> list[Response]:
        return [Response(r.id, logprobs=list(-self.rng.random(len(r.continuations)))) for r in requests]

    def fingerprint(self) -> dict[str, Any]:
        return {"model": self.name}


@given(schema=SCHEMAS, seed=st.integers(0, 2**32 - 1))
def test_every_schema_of_the_subset_gets_a_valid_reply(schema: dict[str, Any], seed: int) -> None:
    reply = answer_structured(Seeded(seed), structured(schema))
    assert reply.error is None
    jsonschema.validate(json.loads(reply.text), schema)


@given(schema=ANY_JSON)
def test_any_json_is_a_schema_or_one_schema_error(schema: Any) -> None:
    try:
        check_schema(schema)
    except SchemaError as e:
        assert "\n" not in str(e)
        return
    reply = answer_structured(Seeded(0), structured(schema))
    if reply.error is None:
        jsonschema.validate(json.loads(reply.text), schema)
    else:  # every generated value is '3', which some ranges leave out
        assert "out of its range" in reply.error


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "unused")


def _backend(url: str, tmp_path: Path, model: str) -> Model:
    return MODELS.get("openai").from_args({"base_url": url, "model": model, "api_key_env": KEY_ENV,
                                           "cache_dir": str(tmp_path), "max_retries": "0"})


def test_the_server_answers_a_schema_as_the_model_does_directly(tiny_lm_dir: Path, tiny_hf: Model, key: None,
                                                                  tmp_path: Path) -> None:
    served = MODELS.get("hf").from_args({"pretrained": str(tiny_lm_dir), "max_batch_size": "8"})
    request = structured(EVERY_KIND)
    with start_server(served, served_name="tiny") as handle:
        backend = _backend(handle.url, tmp_path, "tiny")
        assert backend.payload(request)["response_format"] == {"type": "json_schema", "json_schema": {
            "name": "reply", "schema": EVERY_KIND, "strict": False}}
        [remote] = backend.generate([request])
    assert remote.error is None and remote.text == answer_structured(tiny_hf, request).text
    jsonschema.validate(json.loads(remote.text), EVERY_KIND)


def test_the_server_refuses_what_it_cannot_write_and_reports_failed_values(key: None, tmp_path: Path) -> None:
    model = Scripted(texts={"points": "many"})
    with start_server(model, served_name="scripted") as handle:
        client = openai.OpenAI(base_url=handle.url, api_key="unused", max_retries=0)
        chat = [{"role": "user", "content": "Grade it."}]

        def refusal(response_format: dict[str, Any]) -> str:
            with pytest.raises(openai.BadRequestError) as caught:
                client.chat.completions.create(model="scripted", messages=chat, response_format=response_format)
            return caught.value.body["message"]

        assert "needs a JSON schema" in refusal({"type": "json_object"})
        assert "needs a JSON schema" in refusal({"type": "json_schema", "json_schema": {"name": "x"}})
        assert refusal({"type": "json_schema", "json_schema": {"name": "x", "schema": {"anyOf": []}}}) == (
            "response_format.json_schema.schema: reply: the keyword 'anyOf' is not supported")
        big = {"type": "array", "maxItems": 500, "items": {"type": "string"}}
        assert f"over the limit of {MAX_VALUES}" in refusal({"type": "json_schema", "json_schema": {"schema": big}})
        assert model.calls == []  # refused before any work

        schema = {"type": "object", "properties": {"points": {"type": "number"}, "note": {"type": "string"}}}
        [failed] = _backend(handle.url, tmp_path, "scripted").generate([structured(schema)])
        assert "422" in failed.error and "field 'points': no number in the reply 'many'" in failed.error
        reply = client.chat.completions.create(model="scripted", messages=chat, response_format={
            "type": "json_schema", "json_schema": {"name": "note", "schema": {"type": "object", "properties": {
                "note": {"type": "string"}}}}}, max_tokens=1)
        assert json.loads(reply.choices[0].message.content) == {"note": "plain words"}
        assert reply.choices[0].finish_reason == "stop"


@pytest.mark.slow
def test_the_socratic_model_answers_in_a_schema() -> None:
    """The embedded model, asked for JSON in the prompt, replies with prose; through a schema, with JSON."""
    model = MODELS.get("socratic").from_args({})
    schema = {"type": "object", "required": ["subtask", "rating", "answerable", "reason"], "properties": {
        "subtask": {"enum": ["Concrete Recognition", "Analytical Understanding", "Real-world Application"]},
        "rating": {"type": "integer", "minimum": 0, "maximum": 10, "description": "how clear the question is"},
        "answerable": {"type": "boolean", "description": "whether the page answers the question"},
        "reason": {"type": "string", "maxLength": 60, "description": "why, in a few words"}}}
    chat = (Message("user", (ImagePart(_image(1)), TextPart(
        "The page says: 'The city council approved a new bridge, to open in 2026.' Question: when does the "
        "bridge open? Grade the question as JSON."))),)
    reply = answer_structured(model, structured(schema, chat, max_new_tokens=24))
    assert reply.error is None
    jsonschema.validate(json.loads(reply.text), schema)
    [prose] = model.generate([Request("plain", "generate", chat, GenerationSettings(max_new_tokens=24))])
    with pytest.raises(json.JSONDecodeError):
        json.loads(prose.text)
