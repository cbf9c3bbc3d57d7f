"""Fuzzing `fastmmeval serve` with generated requests against an in-process server over an instant fake model.

Valid chat and loglikelihood bodies (any unicode, images in several formats and modes, every optional field in
range) must get 200. Mutated ones (fields missing or of the wrong type, huge, negative or non-finite numbers,
bad data URLs, deep nesting, random bytes, odd headers) get 200 or a 4xx, never a 5xx; a 4xx from our handlers
carries OpenAI's error JSON, and one the HTTP layer sends for malformed HTTP is a plain 400. After every
request the server still answers a valid one."""

from __future__ import annotations

import base64
import http.client
import io
import json
import socket
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from PIL import Image

from fastmmeval.serve.app import ServerHandle, start_server
from fastmmeval.serve.limits import Limits
from fastmmeval.testing.echo_model import ImageEcho

MODEL = "image-echo"
CHAT, LOGLIKELIHOOD = "/v1/chat/completions", "/v1/loglikelihood"
# Small enough that a mutated image or a random body can cross it (413), large enough for every valid body.
MAX_BODY = 2**20


@pytest.fixture(scope="module")
def served() -> Iterator[ServerHandle]:
    with start_server(ImageEcho(), limits=Limits(max_body_bytes=MAX_BODY, read_timeout_s=2.0)) as handle:
        yield handle


def exchange(handle: ServerHandle, path: str, body: bytes, headers: dict[str, str] | None = None,
             raw_headers: bytes = b"") -> tuple[int, str, bytes]:
    """Status, content type and body of the answer to one POST (its bytes sent as given)."""
    head = {"Host": "fuzz", "Content-Type": "application/json", "Content-Length": str(len(body)),
            "Connection": "close", **(headers or {})}
    request = (f"POST {path} HTTP/1.1\r\n".encode() + b"".join(f"{k}: {v}\r\n".encode("latin-1")
                                                               for k, v in head.items()) + raw_headers + b"\r\n")
    with socket.create_connection((handle.host, handle.port), timeout=30) as sock:
        sock.sendall(request + body)
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, response.getheader("Content-Type", ""), response.read()


def assert_answered(status: int, content_type: str, data: bytes, valid: bool | None, http_layer: bool = False) -> None:
    """200 for a valid request, a 4xx for an invalid one (None: either), never a 5xx; errors as OpenAI JSON."""
    assert status < 500, (status, data[:300])
    if valid is True:
        assert status == 200, data[:300]
    elif valid is False:
        assert 400 <= status < 500, data[:300]
    if status == 200:
        assert "choices" in json.loads(data) or "logprobs" in json.loads(data)
    elif content_type.startswith("text/plain"):
        assert http_layer and status == 400, (status, data[:300])  # aiohttp's own answer to malformed HTTP
    else:
        assert set(json.loads(data)["error"]) == {"message", "type", "param", "code"}


def still_serving(handle: ServerHandle) -> None:
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "still there?"}]}).encode()
    status, _, data = exchange(handle, CHAT, body)
    assert status == 200 and json.loads(data)["choices"][0]["message"]["content"] == "still there?"


def _encoded(image: Image.Image, fmt: str) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


@st.composite
def image_urls(draw: st.DrawFn) -> str:
    """A data URL of a small image in one of the formats and modes clients send."""
    fmt, mode = draw(st.sampled_from([("PNG", "RGB"), ("PNG", "RGBA"), ("PNG", "L"), ("PNG", "P"), ("PNG", "I;16"),
                                      ("JPEG", "RGB"), ("JPEG", "CMYK"), ("JPEG", "L"), ("GIF", "P"), ("BMP", "RGB"),
                                      ("WEBP", "RGBA")]))
    size = (draw(st.integers(1, 12)), draw(st.integers(1, 12)))
    image = Image.new(mode, size, draw(st.integers(0, 255)))
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(_encoded(image, fmt)).decode()


TEXT = st.text(max_size=40)  # any code point, lone surrogates included
content = st.one_of(TEXT, st.none(), st.lists(st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, TEXT),
    st.builds(lambda u: {"type": "image_url", "image_url": {"url": u}}, image_urls()),
    st.builds(lambda u: {"type": "image_url", "image_url": u}, image_urls())), max_size=3))
messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["system", "developer", "user", "assistant"]),
                                           "content": content}), min_size=1, max_size=3)
INT64 = st.integers(-(2**63), 2**63 - 1)
chat_options = st.fixed_dictionaries({}, optional={
    "temperature": st.floats(0, 2) | st.integers(0, 2), "top_p": st.floats(0, 1), "seed": INT64,
    "max_tokens": st.integers(0, 10**6), "max_completion_tokens": st.integers(0, 10**6) | st.none(),
    "stop": st.none() | TEXT | st.lists(TEXT, max_size=4), "n": st.just(1), "stream": st.just(False),
    "response_format": st.just({"type": "text"}),
    "user": TEXT, "frequency_penalty": st.floats(-2, 2)})


@st.composite
def valid_requests(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A chat or loglikelihood request the server must answer with 200."""
    body = {"model": MODEL, "messages": draw(messages)}
    if draw(st.booleans()):
        return CHAT, {**body, **draw(chat_options)}
    return LOGLIKELIHOOD, {**body, "continuations": draw(st.lists(TEXT.filter(bool), min_size=1, max_size=4))}


def _png_declaring(side: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")
    header = side.to_bytes(4, "big") * 2 + bytes([8, 2, 0, 0, 0])
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b"")


BAD_URLS = st.one_of(
    st.sampled_from(["https://example.com/cat.png", "file:///etc/passwd", "data:image/png,not-base64",
                     "data:image/png;base64,!!!!", "data:image/png;base64,", "", "data:",
                     "data:image/png;base64," + base64.b64encode(_png_declaring(50_000)).decode(),
                     "data:image/png;base64," + base64.b64encode(_png_declaring(4097)).decode(),
                     "data:image/svg+xml;base64," + base64.b64encode(b"<svg xmlns='http://www.w3.org/2000/svg'/>")
                     .decode()]),
    st.builds(lambda b: "data:image/png;base64," + base64.b64encode(b).decode(), st.binary(max_size=64)),
    image_urls().map(lambda u: u[: len(u) * 2 // 3]))  # cut short: bad base64 or a truncated image
NON_FINITE = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-1e400"])
ANY_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                        | TEXT, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                        max_leaves=8)
# Values no numeric field takes: null means absent, so it is left out.
NOT_A_NUMBER = st.one_of(st.booleans(), TEXT, st.lists(st.integers(), max_size=2), st.dictionaries(TEXT, TEXT,
                                                                                                    max_size=2))
RANGES = {"temperature": (0, 2), "top_p": (0, 1), "max_tokens": (0, None), "max_completion_tokens": (0, None),
          "n": (1, 1), "seed": (-(2**63), 2**63 - 1)}


@st.composite
def mutated_requests(draw: st.DrawFn) -> tuple[str, bytes, bool | None, str]:
    """A valid request with one thing made wrong: (path, body bytes, whether it is still valid (None: either),
    what was done)."""
    path, body = draw(valid_requests())
    kind = draw(st.sampled_from(["drop", "retype", "out_of_range", "non_finite", "any_value", "bad_image",
                                 "deep", "not_an_object", "random_bytes", "bad_role", "odd_model"]))
    valid: bool | None = False
    raw: bytes | None = None
    if kind == "drop":
        del body[draw(st.sampled_from(["model", "messages", *(["continuations"] if path == LOGLIKELIHOOD else [])]))]
    elif kind == "retype":
        field = draw(st.sampled_from(["messages", "model", *(RANGES if path == CHAT else ["continuations"])]))
        body[field] = draw(NOT_A_NUMBER if field in RANGES else st.one_of(st.integers(), st.booleans(),
                                                                           st.dictionaries(TEXT, TEXT, max_size=2)))
    elif kind == "out_of_range":
        field = draw(st.sampled_from(sorted(RANGES)))
        low, high = RANGES[field]
        body[field] = draw(st.integers(max_value=low - 1) | (st.integers(min_value=high + 1) if high is not None
                                                             else st.integers(max_value=low - 10**30)))
        valid = False if path == CHAT else None  # /v1/loglikelihood ignores generation settings
    elif kind == "non_finite":
        field = draw(st.sampled_from(["temperature", "top_p", "seed", "max_tokens", "frequency_penalty", "x"]))
        body.pop(field, None)
        raw = json.dumps(body).encode()[:-1] + f', "{field}": {draw(NON_FINITE)}}}'.encode()
    elif kind == "any_value":
        body[draw(st.sampled_from(["temperature", "seed", "stop", "n", "stream", "messages", "continuations",
                                   "response_format", "max_tokens", "extra"]))] = draw(ANY_JSON)
        valid = None
    elif kind == "bad_image":
        body["messages"][-1]["content"] = [{"type": "image_url", "image_url": {"url": draw(BAD_URLS)}}]
    elif kind == "deep":
        depth = draw(st.integers(5_000, 200_000))
        opening, closing = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
        raw = json.dumps(body).encode()[:-1] + b', "x": ' + opening.encode() * depth + b"1" + closing.encode() * depth
        raw += b"}"
    elif kind == "not_an_object":
        raw = json.dumps(draw(st.lists(ANY_JSON, max_size=3) | TEXT | st.integers())).encode()
    elif kind == "random_bytes":
        raw = draw(st.binary(max_size=2000))
    elif kind == "bad_role":
        body["messages"][0]["role"] = draw(TEXT.filter(lambda r: r not in ("system", "developer", "user",
                                                                             "assistant")))
    else:  # odd_model: any other name is unknown (404), a non-string is malformed (400)
        body["model"] = draw(TEXT.filter(lambda m: m != MODEL) | ANY_JSON.filter(lambda m: m != MODEL))
    return path, raw if raw is not None else json.dumps(body).encode(), valid, kind


LATIN1 = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=60)
TOKEN = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz-ABCXYZ0123456789"), min_size=1, max_size=20)


@given(valid_requests())
def test_valid_requests_get_200(served: ServerHandle, request_: tuple[str, dict[str, Any]]) -> None:
    path, body = request_
    event(path)
    assert_answered(*exchange(served, path, json.dumps(body).encode()), valid=True)
    still_serving(served)


@given(mutated_requests())
def test_mutated_requests_get_4xx_never_5xx(served: ServerHandle, mutated: tuple[str, bytes, bool | None, str]) -> None:
    path, body, valid, kind = mutated
    event(kind)
    assert_answered(*exchange(served, path, body), valid=valid)
    still_serving(served)


@given(valid_requests(), st.sampled_from(["content_type", "authorization", "extra", "short_length", "bad_length",
                                          "junk_line"]), LATIN1, TOKEN)
def test_odd_headers_are_ignored_or_refused(served: ServerHandle, request_: tuple[str, dict[str, Any]], kind: str,
                                            value: str, name: str) -> None:
    path, body = request_
    data = json.dumps(body).encode()
    event(kind)
    headers, raw_headers, valid, http_layer = {}, b"", True, False
    if kind == "content_type":
        headers["Content-Type"] = value
    elif kind == "authorization":  # this server has no key: an Authorization header is not looked at
        headers["Authorization"] = value
    elif kind == "extra":
        headers[f"X-{name}"] = value
    elif kind == "short_length":  # bytes after the declared body (and `Connection: close`): malformed HTTP
        headers["Content-Length"], valid, http_layer = str(len(data) // 2), False, True
    elif kind == "bad_length":
        headers["Content-Length"], valid, http_layer = f"{value}x", False, True
    else:
        raw_headers, valid, http_layer = f"{name}\r\n".encode(), False, True
    assert_answered(*exchange(served, path, data, headers, raw_headers), valid=valid, http_layer=http_layer)
    still_serving(served)
