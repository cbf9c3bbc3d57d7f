"""`fastmmeval serve` facing clients it cannot trust: limits on bodies, headers, images, numbers and
nesting, each refused with a 4xx and OpenAI's error JSON, and no unauthenticated exposure."""

from __future__ import annotations

import base64
import http.client
import json
import logging
import socket
import struct
import time
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from PIL import Image

from fastmmeval.cli import main
from fastmmeval.errors import ConfigError
from fastmmeval.models.chat_messages import image_data_url
from fastmmeval.serve import openai_format as fmt
from fastmmeval.serve.app import ServerHandle, start_server
from fastmmeval.serve.limits import SERVE_MAX_PIXELS, Limits
from fastmmeval.testing.echo_model import ImageEcho

KEY = "s3cret-canary"


@pytest.fixture(scope="module")
def served() -> Iterator[ServerHandle]:
    with start_server(ImageEcho(), limits=Limits(read_timeout_s=0.5, max_body_bytes=2**20)) as handle:
        yield handle


def post(handle: ServerHandle, body: bytes | dict[str, Any], path: str = "/v1/chat/completions",
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    """The status and JSON answer to one POST."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    connection = http.client.HTTPConnection(handle.host, handle.port, timeout=10)
    try:
        connection.request("POST", path, data, {"Content-Type": "application/json", **(headers or {})})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def raw(handle: ServerHandle, data: bytes, timeout: float = 5.0) -> tuple[bytes, float]:
    """What the server sends back (until it closes or `timeout`) to raw bytes, and how long it took."""
    start = time.monotonic()
    with socket.create_connection((handle.host, handle.port), timeout=timeout) as sock:
        sock.sendall(data)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except TimeoutError:
            pass
    return received, time.monotonic() - start


def chat(content: Any = "hi", **fields: Any) -> dict[str, Any]:
    return {"model": "image-echo", "messages": [{"role": "user", "content": content}], **fields}


def png_declaring(width: int, height: int) -> bytes:
    """A PNG whose header declares `width` x `height` but that holds no pixel data."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


def image_part(url: str) -> list[dict[str, Any]]:
    return [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "what?"}]


def test_a_valid_request_is_answered(served: ServerHandle) -> None:
    status, body = post(served, chat("hi", temperature=0, max_tokens=3))
    assert status == 200 and body["choices"][0]["message"]["content"] == "hi"


def test_an_image_over_the_pixel_cap_is_refused_before_decoding(served: ServerHandle) -> None:
    side = int(SERVE_MAX_PIXELS**0.5) + 1  # over the cap, far below PIL's own 179 MP
    url = "data:image/png;base64," + base64.b64encode(png_declaring(side, side)).decode()
    status, body = post(served, chat(image_part(url)))
    assert status == 400
    assert body["error"]["param"] == "messages[0].content[0]" and body["error"]["code"] == "invalid_image"
    assert "over the cap" in body["error"]["message"] and "--max_image_pixels" in body["error"]["message"]


def test_max_image_pixels_sets_the_cap() -> None:
    url = image_data_url(Image.new("RGB", (30, 20)))
    with start_server(ImageEcho(), limits=Limits(max_image_pixels=599)) as handle:
        assert post(handle, chat(image_part(url)))[0] == 400
    with start_server(ImageEcho(), limits=Limits(max_image_pixels=600)) as handle:
        status, body = post(handle, chat(image_part(url)))
        assert status == 200 and body["choices"][0]["message"]["content"].startswith("30x20:0")
    with pytest.raises(ConfigError, match="max_image_pixels must be positive"):
        Limits(max_image_pixels=0)
    for seconds in (0, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="read_timeout_s must be a positive number"):
            Limits(read_timeout_s=seconds)


def test_the_pixel_cap_holds_for_a_request_s_images_together() -> None:
    url = image_data_url(Image.new("RGB", (30, 20)))  # 600 pixels
    two = [{"type": "image_url", "image_url": {"url": url}}] * 2
    with start_server(ImageEcho(), limits=Limits(max_image_pixels=1000)) as handle:
        assert post(handle, chat(two[:1]))[0] == 200
        status, body = post(handle, {"model": "image-echo", "messages": [{"role": "user", "content": two[:1]},
                                                                         {"role": "user", "content": two[:1]}]})
        assert status == 400 and body["error"]["param"] == "messages[1].content[0]"
        assert "images together have 1,200 pixels, over the cap of 1,000" in body["error"]["message"]
    with start_server(ImageEcho(), limits=Limits(max_image_pixels=1200)) as handle:
        assert post(handle, chat(two))[0] == 200


def test_a_declared_body_over_the_limit_is_refused_at_once(served: ServerHandle) -> None:
    received, seconds = raw(served, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                    b"Content-Type: application/json\r\nContent-Length: 1000000000000\r\n\r\n{}")
    assert received.startswith(b"HTTP/1.1 413") and seconds < 3, (received[:200], seconds)
    assert json.loads(received.split(b"\r\n\r\n", 1)[1])["error"]["message"].startswith("the request body is larger")


def test_a_client_expecting_100_continue_for_a_body_over_the_limit_gets_413_instead(served: ServerHandle) -> None:
    received, _ = raw(served, b"POST /v1/loglikelihood HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              b"Content-Length: 1000000000000\r\nExpect: 100-continue\r\n\r\n")
    assert received.startswith(b"HTTP/1.1 413"), received[:200]
    received, _ = raw(served, b"POST /v1/loglikelihood HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              b"Content-Length: 2\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n{}")
    assert received.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 400"), received[:200]


def test_a_chunked_body_over_the_limit_is_refused(served: ServerHandle) -> None:
    chunk = b"x" * 2**18
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(5)) + b"0\r\n\r\n"
    received, _ = raw(served, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              b"Transfer-Encoding: chunked\r\n\r\n" + body)
    assert received.startswith(b"HTTP/1.1 413"), received[:200]


def test_a_stalled_body_gets_408_and_the_connection_closes(served: ServerHandle) -> None:
    received, seconds = raw(served, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                    b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\"")
    assert received.startswith(b"HTTP/1.1 408") and seconds < 4, (received[:200], seconds)


def test_stalled_headers_are_dropped(served: ServerHandle) -> None:
    received, seconds = raw(served, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
    assert received == b"" and seconds < 4  # closed by the server, not by our 5 s timeout


def test_headers_are_bounded_and_a_client_sending_too_many_is_no_server_error(
        served: ServerHandle, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    big = b"X-Big: " + b"a" * 9000 + b"\r\n"
    many = b"".join(b"X-%d: a\r\n" % i for i in range(70))
    for extra in (big, many):
        received, _ = raw(served, b"GET /health HTTP/1.1\r\nHost: x\r\n" + extra + b"\r\n")
        assert received.startswith(b"HTTP/1.0 400"), received[:200]  # the HTTP layer's plain-text 400
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info], caplog.text


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999", "-1e400"])
@pytest.mark.parametrize("field", ["temperature", "top_p", "max_tokens", "seed", "frequency_penalty"])
def test_non_finite_numbers_are_refused(served: ServerHandle, field: str, number: str) -> None:
    body = json.dumps(chat()).removesuffix("}") + f', "{field}": {number}}}'
    status, answer = post(served, body.encode())
    assert status == 400 and "not a finite number" in answer["error"]["message"], answer


def test_the_translation_refuses_non_finite_numbers_by_field() -> None:
    with pytest.raises(fmt.RequestError, match="'temperature' must be a finite number"):
        fmt.chat_request(chat(temperature=float("nan")), 16, None)


def test_max_tokens_is_checked_also_beside_max_completion_tokens(served: ServerHandle) -> None:
    status, answer = post(served, chat(max_completion_tokens=3, max_tokens=False))  # found by the fuzz test
    assert status == 400 and answer["error"]["param"] == "max_tokens"


@pytest.mark.parametrize(("seed", "status"), [(2**63 - 1, 200), (-(2**63), 200), (2**63, 400), (-(2**63) - 1, 400)])
def test_a_seed_is_an_int64(served: ServerHandle, seed: int, status: int) -> None:
    assert post(served, chat(seed=seed))[0] == status


def test_an_integer_too_long_to_parse_is_400(served: ServerHandle) -> None:
    status, answer = post(served, json.dumps(chat()).removesuffix("}").encode() + b', "seed": ' + b"9" * 5000 + b"}")
    assert status == 400 and "not valid JSON" in answer["error"]["message"]


def test_deep_nesting_is_400(served: ServerHandle) -> None:
    for body in (b"[" * 100_000, b'{"model": "image-echo", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"):
        status, answer = post(served, body)
        assert status == 400 and "nested too deeply" in answer["error"]["message"], answer


@pytest.mark.parametrize(("body", "status", "words"), [
    ({"messages": [{"role": "user", "content": "hi"}]}, 400, "missing required field 'model'"),
    ({"model": 7, "messages": [{"role": "user", "content": "hi"}]}, 400, "'model' must be a string"),
    ({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}, 404, "does not exist"),
])
def test_the_model_field(served: ServerHandle, body: dict[str, Any], status: int, words: str) -> None:
    got, answer = post(served, body)
    assert got == status and words in answer["error"]["message"]
    assert answer["error"]["param"] == "model"


def test_listening_beyond_loopback_needs_a_key() -> None:
    with pytest.raises(ConfigError, match="0.0.0.0 is not a loopback address.*--api_key_env"):
        start_server(ImageEcho(), host="0.0.0.0")
    with start_server(ImageEcho(), host="0.0.0.0", api_key=KEY) as handle:
        assert handle.host == "0.0.0.0"
    with start_server(ImageEcho(), host="localhost") as handle:
        assert handle.host == "127.0.0.1"


def test_the_cli_refuses_to_listen_beyond_loopback_without_a_key(capsys: pytest.CaptureFixture[str]) -> None:
    # socratic would take seconds to load: the refusal comes before the model is built.
    assert main(["serve", "--model", "socratic", "--host", "0.0.0.0", "--port", "0"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fastmmeval: error: serve: --host 0.0.0.0 is not a loopback")


def test_the_key_is_a_bearer_token_and_never_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with start_server(ImageEcho(), api_key=KEY) as handle:
        for authorization, status in [(f"Bearer {KEY}", 200), (f"bearer {KEY}", 200), (KEY, 401),
                                      (f"Basic {KEY}", 401), ("Bearer guess", 401), ("Bearer \udcff", 401)]:
            got, answer = post(handle, chat(), headers={"Authorization": authorization.encode(
                "utf-8", "surrogateescape").decode("latin-1")})
            assert got == status, (authorization, answer)
            assert KEY not in json.dumps(answer)
        assert post(handle, chat())[0] == 401
    assert KEY not in caplog.text


def test_bodies_in_flight_are_bounded_together() -> None:
    limits = Limits(read_timeout_s=2.0, max_body_bytes=1000, max_inflight_bytes=1500)
    with start_server(ImageEcho(), limits=limits) as handle:
        stalled = socket.create_connection((handle.host, handle.port), timeout=5)
        try:  # a client that declared 1,000 bytes and sends them slowly holds them
            stalled.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                            b"Content-Length: 1000\r\n\r\n{")
            time.sleep(0.2)
            received, seconds = raw(handle, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                            b"application/json\r\nContent-Length: 600\r\n\r\n" + b" " * 600)
            assert received.startswith(b"HTTP/1.1 503") and b"Retry-After: 1" in received and seconds < 2
            assert json.loads(received.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "server_busy"
            assert post(handle, chat())[0] == 200  # a small body still fits beside it
        finally:
            stalled.close()
        time.sleep(0.3)  # the stalled request ends (its connection closed) and gives its bytes back
        assert post(handle, json.dumps(chat()).encode() + b" " * 900)[0] == 200
    with pytest.raises(ConfigError, match="max_inflight_mb must hold at least one body"):
        Limits(max_body_bytes=1000, max_inflight_bytes=999)
