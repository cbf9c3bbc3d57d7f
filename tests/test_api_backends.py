"""`--model openai` and `--model anthropic` against small scripted servers: what is sent, retries,
Retry-After, the adaptive concurrency limit, the persistent cache, usage and cost, key handling."""

from __future__ import annotations

import base64
import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from api_fixtures import FakeAPI
from PIL import Image

from fastmmeval.errors import ConfigError
from fastmmeval.models import MODELS, parse_model_args
from fastmmeval.models.api.calls import retry_after_seconds
from fastmmeval.models.api.concurrency_limit import DECREASE, AdaptiveLimit
from fastmmeval.protocol import GenerationSettings, ImagePart, Message, Request, TextPart

KEY_ENV = "FMM_TEST_API_KEY"
KEY = "sk-test-0123456789"

def chat_reply(text: str, prompt_tokens: int = 10, completion_tokens: int = 2) -> web.Response:
    """An OpenAI chat completion answering `text`."""
    return web.json_response({
        "id": "x", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    })


def echo(_: int, body: dict[str, Any]) -> web.Response:
    """Answers with the text of the last user message."""
    content = body["messages"][-1]["content"]
    text = content if isinstance(content, str) else " ".join(p["text"] for p in content if p["type"] == "text")
    return chat_reply(f"echo: {text}")


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_ENV, KEY)
    return KEY


@pytest.fixture
def fake() -> Iterator[FakeAPI]:
    with FakeAPI(echo) as server:
        yield server


def build(name: str, args: str) -> Any:
    """A backend from a `--model_args` string, as `fastmmeval run` builds it."""
    return MODELS.get(name).from_args(parse_model_args(args))


def ask(text: str, rid: str = "r0", image: Image.Image | None = None, **settings: Any) -> Request:
    """A one-turn generate request."""
    parts = ((ImagePart(image, "img"),) if image is not None else ()) + (TextPart(text),)
    return Request(rid, "generate", (Message("user", parts),), GenerationSettings(**settings))


def openai_args(url: str, tmp_path: Path, extra: str = "") -> str:
    return f"base_url={url},model=m,api_key_env={KEY_ENV},cache_dir={tmp_path / 'cache'},backoff=0.01" + extra


def test_openai_sends_chat_with_images_system_and_settings(fake: FakeAPI, key: str, tmp_path: Path) -> None:
    model = build("openai", openai_args(fake.url, tmp_path, ",system=Be brief.,json_mode=true,max_image_side=32"))
    photo = Image.new("RGB", (128, 64), "red")
    [out] = model.generate([ask("What colour?", image=photo, max_new_tokens=7, stop=("\n",))])
    assert out.error is None and out.text == "echo: What colour?"
    assert out.usage == {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}

    path, body, headers = fake.calls[0]
    assert path == "/v1/chat/completions" and headers["Authorization"] == f"Bearer {key}"
    assert body["model"] == "m" and body["max_tokens"] == 7 and body["temperature"] == 0.0
    assert body["stop"] == ["\n"] and body["seed"] == 0 and body["response_format"] == {"type": "json_object"}
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    image_part, text_part = body["messages"][1]["content"]
    assert text_part == {"type": "text", "text": "What colour?"}
    url = image_part["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    sent = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert sent.size == (32, 16)  # shrunk to max_image_side, aspect kept


def test_cache_answers_reruns_without_calls(fake: FakeAPI, key: str, tmp_path: Path) -> None:
    requests = [ask(f"q{i}", f"r{i}") for i in range(5)]
    first = build("openai", openai_args(fake.url, tmp_path)).generate(requests)
    again = build("openai", openai_args(fake.url, tmp_path))
    second = again.generate(requests)
    assert [r.text for r in first] == [r.text for r in second]
    assert len(fake.calls) == 5
    assert again.usage()["cache_hits"] == 5 and again.usage()["api_calls"] == 0
    other_settings = again.generate([ask("q0", "r0", max_new_tokens=3)])  # other content, other key
    assert other_settings[0].error is None and len(fake.calls) == 6
    twins = again.generate([ask("same", "a"), ask("same", "b")])  # identical requests: asked once
    assert twins[0].text == twins[1].text == "echo: same" and len(fake.calls) == 7


def test_retries_5xx_then_records_failure_uncached(key: str, tmp_path: Path) -> None:
    with FakeAPI(lambda n, body: web.json_response({"error": {"message": "boom"}}, status=500)) as server:
        model = build("openai", openai_args(server.url, tmp_path, ",max_retries=2"))
        [out] = model.generate([ask("hi")])
        assert out.text is None and out.error == "openai after 3 attempts: POST /chat/completions: HTTP 500: boom"
        assert len(server.calls) == 3
        usage = model.usage()
        assert usage["retries"] == 2 and usage["failed"] == 1 and usage["api_calls"] == 3
        model.generate([ask("hi")])  # failures are not cached: asked again
        assert len(server.calls) == 6


def test_malformed_and_truncated_json_are_retried(key: str, tmp_path: Path) -> None:
    bad = [web.Response(text="{not json", content_type="application/json"), web.json_response({"choices": []}),
           web.Response(text='{"choices": [{"mess', content_type="application/json")]
    with FakeAPI(lambda n, body: bad[n] if n < len(bad) else chat_reply("fine")) as server:
        [out] = build("openai", openai_args(server.url, tmp_path)).generate([ask("hi")])
        assert out.text == "fine" and len(server.calls) == 4


def test_429_honors_retry_after_and_cuts_the_limit(key: str, tmp_path: Path) -> None:
    def script(n: int, body: dict[str, Any]) -> web.Response:
        if n == 0:
            return web.json_response({"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "0.4"})
        return chat_reply("ok")

    with FakeAPI(script) as server:
        model = build("openai", openai_args(server.url, tmp_path, ",max_concurrency=8"))
        start = time.monotonic()
        [out] = model.generate([ask("hi")])
        assert out.text == "ok" and time.monotonic() - start >= 0.4
        assert model.usage()["rate_limited"] == 1 and model.limit.limit < 8


def test_timeouts_are_retried(key: str, tmp_path: Path) -> None:
    with FakeAPI(echo, delay_s=2.0) as server:  # every call hangs past the timeout
        model = build("openai", openai_args(server.url, tmp_path, ",timeout=0.2,max_retries=1"))
        [out] = model.generate([ask("hi")])
        assert out.error == "openai after 2 attempts: no reply within 0.2 s (timeout)"


def test_concurrency_stays_under_the_ceiling(key: str, tmp_path: Path) -> None:
    with FakeAPI(echo, delay_s=0.05) as server:
        model = build("openai", openai_args(server.url, tmp_path, ",max_concurrency=4"))
        out = model.generate([ask(f"q{i}", f"r{i}") for i in range(24)])
        assert [r.text for r in out] == [f"echo: q{i}" for i in range(24)]
        assert server.max_in_flight == 4


def test_adaptive_limit_cuts_once_per_window_and_grows_back() -> None:
    limit = AdaptiveLimit(16)
    admitted = time.monotonic()
    limit.rate_limited(admitted)
    limit.rate_limited(admitted)  # admitted in the same window: no second cut
    assert limit.limit == pytest.approx(16 * DECREASE)
    limit.rate_limited(time.monotonic())
    assert limit.limit == pytest.approx(16 * DECREASE**2)
    limit.waiting = 100  # plenty of work left (near its end the limit stops growing: see below)
    for _ in range(200):
        limit.succeeded()
    assert limit.limit == 16


def test_a_429_with_requests_still_in_flight_cuts_only_to_what_the_server_accepted() -> None:
    limit = AdaptiveLimit(32)
    limit.limit, limit.in_flight = 17.0, 16  # one above a quota of 16: the 17th was refused
    limit.rate_limited(time.monotonic())
    assert limit.limit == 16


def test_near_the_end_of_the_work_the_limit_keeps_one_slot_free_and_stops_growing() -> None:
    """Once the server has refused a request, a request refused when fewer wait than will start
    within a Retry-After would be retried after everything else: there the limit leaves a slot."""
    limit = AdaptiveLimit(32)
    limit.limit, limit.in_flight, limit.waiting = 16.0, 16, 50
    assert limit.usable() == 16  # no 429 yet: every slot, however few wait
    limit.rate_limited(time.monotonic(), retry_after=1.0)  # refused at 16 in flight: the quota is 16
    limit.succeeded(admitted_at=time.monotonic() - 0.25)  # requests hold a slot 0.25 s: 1 s is 4 more windows
    assert limit.limit == 16 and limit.usable() == 15  # 50 waiting < 16 x (1 + 1 / 0.25): the end
    limit.waiting = 100
    assert limit.usable() == 16
    limit.succeeded(admitted_at=time.monotonic() - 0.25)
    assert limit.limit > 16  # probing upwards again


def test_retry_after_forms() -> None:
    assert retry_after_seconds("2") == 2.0
    assert retry_after_seconds(None) is None and retry_after_seconds("soon") is None
    assert retry_after_seconds("99999") == 120.0
    assert retry_after_seconds("Thu, 01 Jan 1970 00:00:00 GMT") == 0.0


def test_usage_and_cost_from_prices_or_table(fake: FakeAPI, key: str, tmp_path: Path) -> None:
    model = build("openai", openai_args(fake.url, tmp_path, ",price_in=2.5,price_out=10"))
    model.generate([ask("a", "r0"), ask("b", "r1")])
    usage = model.usage()
    assert usage["prompt_tokens"] == 20 and usage["completion_tokens"] == 4
    assert usage["cost_usd"] == pytest.approx((20 * 2.5 + 4 * 10) / 1e6)
    table = tmp_path / "prices.json"
    table.write_text(json.dumps({"m": {"in": 1, "out": 1}}))
    assert build("openai", openai_args(fake.url, tmp_path, f",price_table={table}")).prices == (1.0, 1.0)
    table.write_text(json.dumps({"other": {"in": 1, "out": 1}}))
    with pytest.raises(ConfigError, match="price_table .*prices.json"):
        build("openai", openai_args(fake.url, tmp_path, f",price_table={table}"))


def test_loglikelihood_through_serve_extension(key: str, tmp_path: Path) -> None:
    def script(n: int, body: dict[str, Any]) -> web.Response:
        k = len(body["continuations"])
        return web.json_response({"logprobs": [-1.0 * i for i in range(k)], "is_greedy": [True] + [False] * (k - 1),
                                  "usage": {"prompt_tokens": 5}})

    with FakeAPI(script) as server:
        model = build("openai", openai_args(server.url, tmp_path))
        request = Request("r0", "loglikelihood", (Message("user", (TextPart("Pick"),)),), continuations=("A", "B"))
        [out] = model.loglikelihood([request])
        assert out.logprobs == [0.0, -1.0] and out.is_greedy == [True, False]
        assert server.calls[0][0] == "/v1/loglikelihood" and server.calls[0][1]["continuations"] == ["A", "B"]


def test_server_without_loglikelihood_stops_the_run(key: str, tmp_path: Path) -> None:
    with FakeAPI(lambda n, body: web.json_response({"error": {"message": "Not Found"}}, status=404)) as server:
        model = build("openai", openai_args(server.url, tmp_path))
        request = Request("r0", "loglikelihood", (Message("user", (TextPart("Pick"),)),), continuations=("A",))
        with pytest.raises(ConfigError, match="offers no POST /loglikelihood"):
            model.loglikelihood([request])
        assert len(server.calls) == 1  # not retried


def test_bad_key_stops_the_run_naming_the_variable_not_the_key(key: str, tmp_path: Path) -> None:
    with FakeAPI(lambda n, body: web.json_response({"error": {"message": "bad key"}}, status=401)) as server:
        with pytest.raises(ConfigError, match=f"check the key in \\${KEY_ENV}") as caught:
            build("openai", openai_args(server.url, tmp_path)).generate([ask("hi")])
        assert key not in str(caught.value)


def test_missing_key_variable_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("FMM_NO_SUCH_KEY", raising=False)
    with pytest.raises(ConfigError, match="environment variable FMM_NO_SUCH_KEY .*is not set"):
        build("openai", f"model=m,api_key_env=FMM_NO_SUCH_KEY,cache_dir={tmp_path}")


def test_key_stays_out_of_repr_fingerprint_and_echoed_errors(key: str, tmp_path: Path) -> None:
    echoing_key = {"error": {"message": f"bad request from {KEY}"}}
    with FakeAPI(lambda n, body: web.json_response(echoing_key, status=400)) as server:
        model = build("openai", openai_args(server.url, tmp_path))
        [out] = model.generate([ask("hi")])
        assert out.error is not None and "***" in out.error and key not in out.error
        assert key not in repr(model) and key not in json.dumps(model.fingerprint()) and key not in repr(model.args)
        assert len(server.calls) == 1  # a 400 is this request's fault: not retried


def messages_reply(n: int, body: dict[str, Any]) -> web.Response:
    """An Anthropic Messages reply echoing the last user text."""
    blocks = body["messages"][-1]["content"]
    text = blocks if isinstance(blocks, str) else " ".join(b["text"] for b in blocks if b["type"] == "text")
    return web.json_response({
        "id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
        "content": [{"type": "text", "text": f"claude: {text}"}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 3},
    })


def test_anthropic_sends_image_blocks_and_system(key: str, tmp_path: Path) -> None:
    with FakeAPI(messages_reply) as server:
        model = build("anthropic", f"base_url=http://127.0.0.1:{server.port},model=claude-x,api_key_env={KEY_ENV},"
                      f"cache_dir={tmp_path / 'cache'},system=Be brief.")
        request = Request("r0", "generate", (
            Message("system", (TextPart("You see images."),)),
            Message("user", (ImagePart(Image.new("RGB", (8, 8), "blue"), "img"), TextPart("Colour?"))),
        ), GenerationSettings(max_new_tokens=5, stop=("\n", "END")))
        [out] = model.generate([request])
        assert out.text == "claude: Colour?" and out.usage == {"prompt_tokens": 12, "completion_tokens": 3}
        path, body, headers = server.calls[0]
        assert path == "/v1/messages"  # the key goes as x-api-key or (anthropic 2.x) a bearer token
        assert key in (headers.get("x-api-key"), headers.get("Authorization", "").removeprefix("Bearer "))
        assert body["system"] == "Be brief.\n\nYou see images." and body["max_tokens"] == 5
        assert body["stop_sequences"] == ["END"] and "temperature" not in body  # anthropic 2.x: API default
        image, text = body["messages"][0]["content"]
        assert image["type"] == "image" and image["source"]["media_type"] == "image/png"
        assert Image.open(io.BytesIO(base64.b64decode(image["source"]["data"]))).size == (8, 8)
        assert text == {"type": "text", "text": "Colour?"}


def test_anthropic_retries_overload_and_honors_429(key: str, tmp_path: Path) -> None:
    def script(n: int, body: dict[str, Any]) -> web.Response:
        error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        if n == 0:
            return web.json_response(error, status=529)
        if n == 1:
            return web.json_response(error, status=429, headers={"retry-after": "0.2"})
        return messages_reply(n, body)

    with FakeAPI(script) as server:
        model = build("anthropic", f"base_url=http://127.0.0.1:{server.port},model=claude-x,api_key_env={KEY_ENV},"
                      f"cache_dir=off,backoff=0.01,temperature=0")
        [out] = model.generate([ask("hi")])
        assert out.text == "claude: hi" and len(server.calls) == 3
        assert server.calls[0][1]["temperature"] == 0  # asked for explicitly: sent even by anthropic 2.x
        assert model.usage()["retries"] == 2 and model.usage()["rate_limited"] == 1
