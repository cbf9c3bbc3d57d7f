"""`fastmmeval serve`: an OpenAI-compatible server over our models, driven by the official `openai` SDK."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import openai
import pytest
from PIL import Image
from vlm_fixtures import BUILDERS

from fastmmeval.engine import Status
from fastmmeval.models import MODELS
from fastmmeval.models.base import Model
from fastmmeval.models.chat_messages import image_data_url
from fastmmeval.protocol import GenerationSettings, ImagePart, Message, Request, TextPart
from fastmmeval.serve.app import start_server
from fastmmeval.testing.echo_model import ImageEcho


def _image(seed: int, size: tuple[int, int] = (40, 30)) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def _request(text: str, max_tokens: int = 12, images: tuple[Image.Image, ...] = ()) -> Request:
    """What the server builds from a one-turn user chat at temperature 0."""
    parts = (*(ImagePart(i) for i in images), TextPart(text))
    return Request(id=text, kind="generate", messages=(Message("user", parts),),
                   generation=GenerationSettings(max_new_tokens=max_tokens, temperature=0.0))


def _tiny_hf(folder: Path) -> Model:
    return MODELS.get("hf").from_args({"pretrained": str(folder), "max_batch_size": "8"})


@pytest.fixture(scope="module")
def tiny_hf(tiny_lm_dir: Path) -> Model:
    """The served model's twin, answering directly (the served instance belongs to the server's worker)."""
    return _tiny_hf(tiny_lm_dir)


@pytest.fixture(scope="module")
def served(tiny_lm_dir: Path) -> Any:
    with start_server(_tiny_hf(tiny_lm_dir), served_name="tiny") as handle:
        yield handle


@pytest.fixture
def client(served: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.url, api_key="unused", max_retries=0)


def test_models_and_one_chat_completion(client: openai.OpenAI, tiny_hf: Model) -> None:
    assert [m.id for m in client.models.list().data] == ["tiny"]
    reply = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "The cat"}], max_tokens=12, temperature=0, seed=3)
    expected = tiny_hf.generate([_request("The cat")])[0]
    assert reply.choices[0].message.content == expected.text
    assert reply.usage.prompt_tokens == expected.usage["prompt_tokens"]
    assert reply.usage.completion_tokens == expected.usage["completion_tokens"]
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    assert reply.choices[0].finish_reason == ("length" if reply.usage.completion_tokens == 12 else "stop")


def test_concurrent_requests_join_one_engine_batch_and_match_one_by_one(
        client: openai.OpenAI, served: Any, tiny_hf: Model) -> None:
    prompts = [f"The quick brown fox {i}" for i in range(24)]
    lengths = [4 + i % 9 for i in range(24)]  # different lengths: sequences leave and join mid-batch

    def ask(i: int) -> str:
        reply = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": prompts[i]}],
                                               max_completion_tokens=lengths[i], temperature=0)
        return reply.choices[0].message.content

    served.batches.clear()
    with ThreadPoolExecutor(12) as pool:
        texts = list(pool.map(ask, range(24)))
    alone = [tiny_hf.generate([_request(p, n)])[0].text for p, n in zip(prompts, lengths, strict=True)]
    assert texts == alone  # greedy decoding is batch invariant
    assert max(served.batches) > 1, served.batches  # requests in flight were taken together


def test_stop_strings_and_sampling_settings_reach_the_model(client: openai.OpenAI, tiny_hf: Model) -> None:
    full = tiny_hf.generate([_request("Coffee is", 16)])[0].text
    stop = full[3:5]
    reply = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Coffee is"}],
                                           max_tokens=16, temperature=0, stop=[stop])
    assert reply.choices[0].message.content == full[:full.index(stop)]
    assert reply.choices[0].finish_reason == "stop"
    sampled = [client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Coffee is"}],
                                              max_tokens=16, temperature=1.0, seed=7).choices[0].message.content
               for _ in range(2)]
    assert sampled[0] == sampled[1]  # same seed, same sample


def test_loglikelihood_extension(client: openai.OpenAI, tiny_hf: Model) -> None:
    body = {"model": "tiny", "messages": [{"role": "system", "content": "Answer."},
                                          {"role": "user", "content": "What animal? cat or dog"}],
            "continuations": ["cat", "dog", " horse"]}
    result = client.post("/loglikelihood", body=body, cast_to=object)
    request = Request(id="x", kind="loglikelihood", continuations=("cat", "dog", " horse"), messages=(
        Message("system", (TextPart("Answer."),)), Message("user", (TextPart("What animal? cat or dog"),))))
    expected = tiny_hf.loglikelihood([request])[0]
    assert result["logprobs"] == pytest.approx(expected.logprobs, abs=1e-4)
    assert result["is_greedy"] == expected.is_greedy
    assert result["usage"]["prompt_tokens"] == expected.usage["prompt_tokens"]


def test_a_client_that_gives_up_frees_its_engine_row(client: openai.OpenAI, served: Any, tiny_hf: Model) -> None:
    long = _request("The quick brown fox", 900)
    assert tiny_hf.generate([long])[0].usage["completion_tokens"] == 900  # no EOS: it would run for seconds
    batcher, engine = served.server.batcher, served.server.model.engine
    aborted = batcher.aborted
    with pytest.raises(openai.APITimeoutError):
        client.with_options(timeout=0.3).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "The quick brown fox"}], max_tokens=900, temperature=0)
    deadline = time.monotonic() + 10
    while batcher.aborted == aborted and time.monotonic() < deadline:
        time.sleep(0.02)
    assert batcher.aborted == aborted + 1
    assert not engine.scheduler.has_unfinished()


def test_engine_abort_of_a_running_and_a_waiting_sequence_leaves_the_others_unchanged(tiny_hf: Model) -> None:
    engine = tiny_hf.engine
    prompts = [tiny_hf.build_prompt(_request(f"The cat {i}"))[0] for i in range(4)]
    settings = GenerationSettings(max_new_tokens=20)
    alone = [engine.generate([(p, settings, None)])[0].text for p in prompts]
    engine.scheduler.max_batch_size = 2
    try:
        seqs = [engine.add(p, settings) for p in prompts]
        for _ in range(3):
            engine.step()
        running = [s for s in seqs if s.status is Status.RUNNING]
        waiting = [s for s in seqs if s.status is Status.WAITING]
        engine.abort(running[0])
        engine.abort(waiting[0])
        while engine.scheduler.has_unfinished():
            engine.step()
    finally:
        engine.scheduler.max_batch_size = 8
    for seq, text in zip(seqs, alone, strict=True):
        if seq in (running[0], waiting[0]):
            assert seq.finish_reason == "abort"
        else:
            assert seq.text == text


def test_stopping_answers_requests_in_flight_with_503(tiny_lm_dir: Path) -> None:
    model = _tiny_hf(tiny_lm_dir)
    handle = start_server(model, served_name="tiny")
    client = openai.OpenAI(base_url=handle.url, api_key="unused", max_retries=0)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(client.chat.completions.create, model="tiny", max_tokens=900, temperature=0,
                              messages=[{"role": "user", "content": "The quick brown fox"}])
        while not model.engine.scheduler.running:
            time.sleep(0.01)
        handle.stop()
        with pytest.raises(openai.APIStatusError) as caught:
            pending.result()
    assert caught.value.status_code == 503
    assert not model.engine.scheduler.has_unfinished()  # the model is free again


@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"model": "gpt-4o"}, openai.NotFoundError, "does not exist"),
    ({"n": 2}, openai.BadRequestError, "only n=1"),
    ({"temperature": 5}, openai.BadRequestError, "'temperature' must be in"),
    ({"messages": [{"role": "tool", "content": "x"}]}, openai.BadRequestError, "unsupported role 'tool'"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {
        "url": "https://example.com/cat.png"}}]}]}, openai.BadRequestError, "only data URLs"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {
        "url": "data:image/png;base64,bm90IGFuIGltYWdl"}}]}]}, openai.BadRequestError,
     "image refused: UnidentifiedImageError"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {
        "url": image_data_url(_image(0))}}]}]}, openai.UnprocessableEntityError, "text-only model"),
])
def test_bad_requests_get_openai_errors(client: openai.OpenAI, kwargs: dict[str, Any], error: type,
                                        words: str) -> None:
    args = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **kwargs}
    with pytest.raises(error) as caught:
        client.chat.completions.create(**args)
    assert words in caught.value.body["message"]


def test_raw_http_errors_are_openai_json(served: Any) -> None:
    base = served.url.removesuffix("/v1")
    for path, data, status in [("/v1/chat/completions", b"{not json", 400), ("/v1/nowhere", b"{}", 404),
                               ("/v1/loglikelihood", b'{"model": "tiny", "messages": [{"role": "user", '
                                                     b'"content": "x"}], "continuations": []}', 400)]:
        request = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=10)
        assert caught.value.code == status
        assert set(json.loads(caught.value.read())["error"]) == {"message", "type", "param", "code"}


def test_images_through_a_vision_language_engine(tmp_path: Path) -> None:
    folder = BUILDERS["qwen2_vl"](tmp_path)
    reference = _tiny_hf(folder)
    images = [_image(seed, (28 * (1 + seed % 3), 28 * 2)) for seed in range(6)]  # different token counts
    with start_server(_tiny_hf(folder), served_name="vlm") as handle:
        client = openai.OpenAI(base_url=handle.url, api_key="unused", max_retries=0)

        def ask(seed: int) -> str:
            content = [{"type": "image_url", "image_url": {"url": image_data_url(images[seed])}},
                       {"type": "text", "text": f"What is in this image? {seed}"}]
            return client.chat.completions.create(model="vlm", messages=[{"role": "user", "content": content}],
                                                  max_tokens=6 + seed, temperature=0).choices[0].message.content

        with ThreadPoolExecutor(6) as pool:
            texts = list(pool.map(ask, range(6)))
    expected = reference.generate([_request(f"What is in this image? {s}", 6 + s, (images[s],)) for s in range(6)])
    assert texts == [r.text for r in expected]


def test_images_reach_a_micro_batched_backend() -> None:
    model = ImageEcho()
    images = [_image(seed, (20 + seed, 10)) for seed in range(8)]
    with start_server(model, batch_window_s=0.05) as handle:
        client = openai.OpenAI(base_url=handle.url, api_key="unused", max_retries=0)

        def ask(seed: int) -> str:
            content = [{"type": "text", "text": f"what is {seed}?"},
                       {"type": "image_url", "image_url": {"url": image_data_url(images[seed])}}]
            return client.chat.completions.create(model="image-echo", messages=[{"role": "user", "content": content}],
                                                  response_format={"type": "text"}).choices[0].message.content

        with ThreadPoolExecutor(8) as pool:
            texts = list(pool.map(ask, range(8)))
    for seed, text in enumerate(texts):
        assert text == f"{20 + seed}x10:{int(np.asarray(images[seed]).sum())} what is {seed}?<image>"
    assert sum(model.calls) == 8 and max(model.calls) > 1  # micro-batched


def test_a_server_with_a_key_refuses_clients_without_it() -> None:
    with start_server(ImageEcho(), api_key="s3cret-canary") as handle:
        for key, ok in [("s3cret-canary", True), ("guess-123", False)]:
            client = openai.OpenAI(base_url=handle.url, api_key=key, max_retries=0)
            if ok:
                assert [m.id for m in client.models.list().data] == ["image-echo"]
            else:
                with pytest.raises(openai.AuthenticationError) as caught:
                    client.models.list()
                assert "s3cret-canary" not in str(caught.value.body) and "guess-123" not in str(caught.value.body)


def test_a_worker_bug_fails_the_requests_in_hand_and_serving_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    with start_server(ImageEcho()) as handle:
        client = openai.OpenAI(base_url=handle.url, api_key="unused", max_retries=0)
        handle_items = handle.server.batcher._handle
        calls = iter([ZeroDivisionError("bug"), None])

        def buggy(items: list) -> None:
            if items and (error := next(calls, None)):
                raise error
            handle_items(items)

        monkeypatch.setattr(handle.server.batcher, "_handle", buggy)
        with pytest.raises(openai.UnprocessableEntityError, match="model worker failed: ZeroDivisionError: bug"):
            client.chat.completions.create(model="image-echo", messages=[{"role": "user", "content": "a"}])
        reply = client.chat.completions.create(model="image-echo", messages=[{"role": "user", "content": "b"}])
        assert reply.choices[0].message.content == "b"


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_cli_serves_until_interrupted(tiny_lm_dir: Path, stop: signal.Signals) -> None:
    """Ctrl-C stops it even when it was started with SIGINT ignored (as a background job is, or
    the child of a process that ignores it); so does SIGTERM."""
    command = [sys.executable, "-m", "fastmmeval", "serve", "--model", "hf", "--model_args",
               f"pretrained={tiny_lm_dir}", "--port", "0", "--served_model_name", "tiny-cli",
               "--api_key_env", "SERVE_KEY"]
    env = {**os.environ, "COLUMNS": "400", "SERVE_KEY": "local-key"}
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) as process:
        try:
            line = ""
            while "serving" not in line:
                line = process.stderr.readline()
                assert line or process.poll() is None, "server exited before serving"
            url = line.split(" at ")[1].split()[0]
            with openai.OpenAI(base_url=url, api_key="local-key", max_retries=0) as client:
                reply = client.chat.completions.create(
                    model="tiny-cli", messages=[{"role": "user", "content": "The cat"}], max_tokens=3, temperature=0
                )
            assert reply.usage.completion_tokens <= 3
        finally:
            process.send_signal(stop)
            assert process.wait(timeout=30) == 0
        assert "local-key" not in line + process.stderr.read()  # the key is never logged


@pytest.mark.slow
def test_socratic_serves_images() -> None:
    model = MODELS.get("socratic").from_args({})
    cat = _image(1, (64, 64))
    with start_server(model, served_name="socratic") as handle:
        client = openai.OpenAI(base_url=handle.url, api_key="unused", max_retries=0)
        content = [{"type": "image_url", "image_url": {"url": image_data_url(cat)}},
                   {"type": "text", "text": "What is in the image? Answer in one word."}]
        reply = client.chat.completions.create(model="socratic", messages=[{"role": "user", "content": content}],
                                               max_tokens=8, temperature=0)
        expected = model.generate([_request("What is in the image? Answer in one word.", 8, (cat,))])[0]
        assert reply.choices[0].message.content == expected.text
        scored = client.post("/loglikelihood", cast_to=object, body={
            "model": "socratic", "messages": [{"role": "user", "content": content}], "continuations": ["Yes", "No"]})
        assert len(scored["logprobs"]) == 2
