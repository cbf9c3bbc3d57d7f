"""OpenAI wire format <-> our Requests and Responses, for `fastmmeval serve`.

Pure translation, no HTTP: a malformed body raises `RequestError` carrying the status code and
OpenAI error fields the server answers with.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import time
import uuid
from typing import Any, NoReturn

from PIL import Image

from fastmmeval.errors import FastmmevalError
from fastmmeval.images import ImageRefused, open_image, to_rgb
from fastmmeval.models.schema_subset import SchemaError, check_schema
from fastmmeval.protocol import GenerationSettings, ImagePart, Message, Part, Request, Response, TextPart

# OpenAI's "developer" role is its newer name for the system turn.
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
RESPONSE_FORMATS = ("text", "json_object", "json_schema")
# OpenAI's own default when a request gives no temperature.
DEFAULT_TEMPERATURE = 1.0
# A seed is an int64 in OpenAI's API, and what torch's generators take.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class RequestError(FastmmevalError):
    """A request the server refuses: HTTP `status` and OpenAI's error `type`, `param` and `code`."""

    def __init__(self, message: str, status: int = 400, type_: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.type, self.param, self.code = status, type_, param, code

    def body(self) -> dict[str, Any]:
        """OpenAI's error JSON: `{"error": {"message", "type", "param", "code"}}`."""
        return {"error": {"message": str(self), "type": self.type, "param": self.param, "code": self.code}}


def parse_body(raw: bytes) -> dict[str, Any]:
    """The JSON object a request body holds, strictly: no NaN or Infinity (JSON has neither), no number
    that overflows to one, no nesting deeper than the parser's recursion limit."""
    try:
        body = json.loads(raw, parse_constant=_not_finite, parse_float=_finite_float)
    except RecursionError:
        raise RequestError("the request body is not valid JSON: nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError, and int() refusing thousands of digits
        raise RequestError(f"the request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    return body


def _not_finite(literal: str) -> NoReturn:
    raise RequestError(f"the request body is not valid JSON: {literal} is not a finite number")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if math.isfinite(value):
        return value
    _not_finite(literal)


def check_model(body: dict[str, Any], served_name: str) -> None:
    """Refuse a body without a `model` string (400) or naming another model than `served_name` (404)."""
    model = _need(body, "model", str, "a string")
    if model != served_name:
        raise RequestError(f"the model {model!r} does not exist; this server serves {served_name!r}",
                           status=404, param="model", code="model_not_found")


def _need(body: dict[str, Any], key: str, kind: type, what: str) -> Any:
    """`body[key]`, checked to be present and of `kind`."""
    if key not in body:
        raise RequestError(f"missing required field {key!r}", param=key)
    value = body[key]
    if not isinstance(value, kind):
        raise RequestError(f"{key!r} must be {what}, got {type(value).__name__}", param=key)
    return value


def _optional_number(body: dict[str, Any], key: str, kind: type, low: float | None = None,
                     high: float | None = None) -> Any:
    """`body[key]` if given and not null, checked to be a number of `kind` within [low, high]; else None."""
    value = body.get(key)
    if value is None:
        return None
    accepted = (int,) if kind is int else (int, float)
    if isinstance(value, bool) or not isinstance(value, accepted):
        raise RequestError(f"{key!r} must be {'an integer' if kind is int else 'a number'}, got {value!r}", param=key)
    if not math.isfinite(value):
        raise RequestError(f"{key!r} must be a finite number, got {value!r}", param=key)
    if (low is not None and value < low) or (high is not None and value > high):
        raise RequestError(f"{key!r} must be in [{low}, {high if high is not None else 'inf'}], got {value!r}",
                           param=key)
    return kind(value)


def decode_image_url(url: str, where: str, max_pixels: int | None) -> Image.Image:
    """The RGB image inside a `data:image/...;base64,...` URL, refused before decoding when it declares
    more than `max_pixels`; any other URL is refused (the server fetches nothing from the network)."""
    if not url.startswith("data:"):
        scheme = url.split(":", 1)[0] if ":" in url else "?"
        raise RequestError(f"{where}: only data URLs (data:image/...;base64,...) are accepted, not {scheme}: URLs; "
                           "this server fetches nothing from the network", param=where, code="unsupported_image_url")
    header, sep, payload = url.partition(",")
    if not sep or not header.endswith(";base64"):
        raise RequestError(f"{where}: expected a base64 data URL (data:image/...;base64,...)", param=where)
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as e:
        raise RequestError(f"{where}: bad base64 in data URL: {e}", param=where, code="invalid_image") from None
    try:
        return to_rgb(open_image(data, max_pixels))
    except ImageRefused as e:
        raise RequestError(f"{where}: image refused: {e}", param=where, code="invalid_image") from None


class _PixelBudget:
    """A request's images together may have at most `cap` pixels (None: no cap): each is refused before
    decoding when it alone declares more, and after decoding when it brings the total over."""

    def __init__(self, cap: int | None) -> None:
        self.cap, self.used = cap, 0

    def image(self, url: str, where: str) -> Image.Image:
        """The image in `url`, counted against the budget."""
        image = decode_image_url(url, where, self.cap)
        self.used += image.width * image.height
        if self.cap is not None and self.used > self.cap:
            raise RequestError(f"{where}: the request's images together have {self.used:,} pixels, over the cap "
                               f"of {self.cap:,} (--max_image_pixels)", param=where, code="invalid_image")
        return image


def _parts(content: Any, where: str, pixels: _PixelBudget) -> tuple[Part, ...]:
    """A message's content (a string or a list of text / image_url parts) as our parts."""
    if isinstance(content, str):
        return (TextPart(content),)
    if not isinstance(content, list):
        raise RequestError(f"{where}: content must be a string or a list of parts", param=where)
    parts: list[Part] = []
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append(TextPart(part["text"]))
        elif kind == "image_url":
            image_url = part.get("image_url")
            url = image_url.get("url") if isinstance(image_url, dict) else image_url
            if not isinstance(url, str):
                raise RequestError(f"{at}: image_url part needs image_url.url", param=at)
            parts.append(ImagePart(pixels.image(url, at), ref=f"{at} ({len(url)} chars)"))
        else:
            raise RequestError(f"{at}: unsupported content part {kind!r} (accepted: text, image_url)", param=at)
    return tuple(parts)


def parse_messages(body: dict[str, Any], max_pixels: int | None) -> tuple[Message, ...]:
    """`body["messages"]` as our Messages (roles system/developer/user/assistant); refused when its
    images together have more than `max_pixels`."""
    raw = _need(body, "messages", list, "a list of messages")
    if not raw:
        raise RequestError("'messages' must not be empty", param="messages")
    messages = []
    pixels = _PixelBudget(max_pixels)
    for i, m in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            role = m.get("role") if isinstance(m, dict) else None
            raise RequestError(f"{where}: unsupported role {role!r} (accepted: {', '.join(ROLES)})", param=where)
        content = m.get("content")
        parts = _parts("" if content is None else content, f"{where}.content", pixels)
        messages.append(Message(ROLES[m["role"]], parts))
    return tuple(messages)


def _stop(body: dict[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,)
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= 4:
        return tuple(s for s in stop if s)
    raise RequestError("'stop' must be a string or a list of up to 4 strings", param="stop")


def chat_request(body: dict[str, Any], default_max_tokens: int, max_pixels: int | None) -> Request:
    """A `POST /v1/chat/completions` body as a generate Request (n=1, no streaming)."""
    json_schema = _json_schema(body.get("response_format"))
    messages = parse_messages(body, max_pixels)
    if body.get("stream"):
        raise RequestError("streaming is not supported by this server", param="stream", code="unsupported")
    n = _optional_number(body, "n", int, 1)
    if n not in (None, 1):
        raise RequestError(f"only n=1 is supported, got n={n}", param="n", code="unsupported")
    # max_completion_tokens is OpenAI's newer name and wins; both are checked when both are sent.
    max_completion_tokens = _optional_number(body, "max_completion_tokens", int, 0)
    max_tokens = _optional_number(body, "max_tokens", int, 0)
    if max_completion_tokens is not None:
        max_tokens = max_completion_tokens
    temperature = _optional_number(body, "temperature", float, 0, 2)
    top_p = _optional_number(body, "top_p", float, 0, 1)
    seed = _optional_number(body, "seed", int, INT64_MIN, INT64_MAX)
    settings = GenerationSettings(
        max_new_tokens=default_max_tokens if max_tokens is None else max_tokens,
        temperature=DEFAULT_TEMPERATURE if temperature is None else temperature,
        top_p=1.0 if top_p is None else top_p,
        stop=_stop(body),
        seed=0 if seed is None else seed,
    )
    return Request(id=f"chatcmpl-{uuid.uuid4().hex}", kind="generate", messages=messages, generation=settings,
                   json_schema=json_schema)


def _json_schema(response_format: Any) -> str | None:
    """The JSON schema (as JSON text) a `response_format` asks the reply to follow; None for text."""
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind not in RESPONSE_FORMATS:
        raise RequestError(f"'response_format' type must be one of {', '.join(RESPONSE_FORMATS)}",
                           param="response_format")
    if kind == "text":
        return None
    spec = response_format.get("json_schema")
    if kind == "json_object" or not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
        raise RequestError("'response_format' needs a JSON schema: {\"type\": \"json_schema\", \"json_schema\": "
                           "{\"name\": ..., \"schema\": {...}}} (this server writes JSON only in a given shape)",
                           param="response_format")
    try:
        check_schema(spec["schema"])
    except SchemaError as e:
        raise RequestError(f"response_format.json_schema.schema: {e}", param="response_format",
                           code="unsupported_schema") from None
    return json.dumps(spec["schema"], ensure_ascii=False)


def loglikelihood_request(body: dict[str, Any], max_pixels: int | None) -> Request:
    """A `POST /v1/loglikelihood` body (`messages` + `continuations`) as a loglikelihood Request."""
    messages = parse_messages(body, max_pixels)
    continuations = _need(body, "continuations", list, "a list of strings")
    if not continuations or not all(isinstance(c, str) and c for c in continuations):
        raise RequestError("'continuations' must be a non-empty list of non-empty strings", param="continuations")
    return Request(id=f"ll-{uuid.uuid4().hex}", kind="loglikelihood", messages=messages,
                   continuations=tuple(continuations))


def usage(response: Response) -> dict[str, int]:
    """OpenAI's usage object from a Response's token counts."""
    prompt = int(response.usage.get("prompt_tokens", 0))
    completion = int(response.usage.get("completion_tokens", 0))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def chat_completion(request: Request, response: Response, model: str) -> dict[str, Any]:
    """The `chat.completion` object answering `request` with `response`'s text."""
    tokens = usage(response)
    # "length" when the reply used its whole token allowance: decoding was cut, not ended. A reply in
    # a JSON schema is written whole, its tokens those of all its values.
    cut = request.json_schema is None and tokens["completion_tokens"] >= request.generation.max_new_tokens
    finish = "length" if cut else "stop"
    return {
        "id": request.id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": response.text or ""},
                     "finish_reason": finish, "logprobs": None}],
        "usage": tokens,
    }


def loglikelihood_result(request: Request, response: Response, model: str) -> dict[str, Any]:
    """Our `/v1/loglikelihood` answer: per continuation, its summed log-probability and whether
    greedy decoding would produce it."""
    return {"id": request.id, "object": "loglikelihood", "model": model, "logprobs": response.logprobs,
            "is_greedy": response.is_greedy, "usage": usage(response)}
