"""The `vllm` backend without vLLM: request translation, sampling settings, the missing-vLLM error,
and generate/loglikelihood against a stand-in `vllm` module that records its calls."""

from __future__ import annotations

import base64
import hashlib
import io
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from fastmmeval.errors import ConfigError
from fastmmeval.models import MODELS
from fastmmeval.models.local.vllm_backend import (
    MISSING_VLLM,
    VLLM,
    VLLMArgs,
    llm_kwargs,
    to_sampling_kwargs,
    to_vllm_chat,
)
from fastmmeval.protocol import GenerationSettings, ImagePart, Message, Request, TextPart

PIXELS = Image.fromarray(np.random.default_rng(0).integers(0, 256, (17, 23, 3), dtype=np.uint8), "RGB")


def decode(url: str) -> Image.Image:
    prefix = "data:image/png;base64,"
    assert url.startswith(prefix)
    return Image.open(io.BytesIO(base64.b64decode(url[len(prefix):])))


def ask(rid: str, text: str, images: int = 0, **generation: Any) -> Request:
    parts = (*(ImagePart(PIXELS) for _ in range(images)), TextPart(text))
    return Request(id=rid, kind="generate", messages=(Message("user", parts),),
                   generation=GenerationSettings(**generation))


# -- a stand-in for vllm ---------------------------------------------------------------------


@dataclass
class FakeLogprob:
    logprob: float
    rank: int | None = None


@dataclass
class FakeCompletion:
    text: str
    token_ids: list[int]


@dataclass
class FakeOutput:
    prompt_token_ids: list[int]
    prompt_logprobs: list[dict[int, FakeLogprob] | None]
    outputs: list[FakeCompletion] = field(default_factory=list)


class FakeSamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


def token_logprob(token: int) -> float:
    return -((token % 7) + 1) / 10


def token_rank(token: int) -> int:
    return 1 if chr(token) in "aeiou" else 2


def render(conversation: list[dict[str, Any]], add_generation_prompt: bool, continue_final_message: bool) -> str:
    """A toy chat template: <role>content</> per message; images as <img>."""
    text = ""
    for n, message in enumerate(conversation):
        content = message["content"]
        if not isinstance(content, str):
            content = "".join(p["text"] if p["type"] == "text" else "<img>" for p in content)
        last = n == len(conversation) - 1
        text += f"<{message['role']}>{content}" + ("" if last and continue_final_message else "</>")
    if add_generation_prompt:
        text += "<assistant>"
    if continue_final_message and "DRIFT" in text:
        text = "#" + text
    return text


class FakeLLM:
    instances: list[FakeLLM] = []

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.calls: list[dict[str, Any]] = []
        FakeLLM.instances.append(self)

    def chat(self, messages: list[list[dict[str, Any]]], sampling_params: Any = None, use_tqdm: bool = True,
             chat_template: str | None = None, add_generation_prompt: bool = True,
             continue_final_message: bool = False) -> list[FakeOutput]:
        self.calls.append({"messages": messages, "sampling_params": sampling_params, "use_tqdm": use_tqdm,
                           "chat_template": chat_template, "add_generation_prompt": add_generation_prompt,
                           "continue_final_message": continue_final_message})
        outputs = []
        for conversation in messages:
            text = render(conversation, add_generation_prompt, continue_final_message)
            if "BOOM" in text:
                raise ValueError("boom in this batch")
            ids = [ord(c) for c in text]
            logprobs = [None] + [{t: FakeLogprob(token_logprob(t), token_rank(t))} for t in ids[1:]]
            reply = "re:" + text[-12:]
            outputs.append(FakeOutput(ids, logprobs, [FakeCompletion(reply, list(range(len(reply))))]))
        return outputs

    def get_tokenizer(self) -> Any:
        return types.SimpleNamespace(chat_template="{{ model template }}")


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = types.ModuleType("vllm")
    module.LLM = FakeLLM  # type: ignore[attr-defined]
    module.SamplingParams = FakeSamplingParams  # type: ignore[attr-defined]
    module.__version__ = "0.0.fake"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", module)
    FakeLLM.instances.clear()
    return module


# -- translation ------------------------------------------------------------------------------


def test_images_become_png_data_urls_in_order_with_the_same_pixels() -> None:
    request = Request(id="q", kind="generate", messages=(
        Message("system", (TextPart("Be brief."),)),
        Message("user", (TextPart("Look: "), ImagePart(PIXELS), TextPart("What "), TextPart("is it?"),
                         TextPart(""))),
    ))
    chat = to_vllm_chat(request)
    assert chat[0] == {"role": "system", "content": "Be brief."}
    assert chat[1]["role"] == "user"
    text1, image, text2 = chat[1]["content"]
    assert text1 == {"type": "text", "text": "Look: "}
    assert text2 == {"type": "text", "text": "What is it?"}
    assert image["type"] == "image_url" and set(image["image_url"]) == {"url"}
    back = decode(image["image_url"]["url"])
    assert back.mode == "RGB" and back.size == PIXELS.size and back.tobytes() == PIXELS.tobytes()


def test_text_only_turns_are_plain_strings_and_odd_image_modes_are_sent_as_rgb() -> None:
    cmyk = Image.new("CMYK", (4, 3), (0, 255, 0, 0))
    request = Request(id="q", kind="generate", messages=(
        Message("user", (TextPart("Hi "), TextPart("there"))),
        Message("assistant", (TextPart("Hello."),)),
        Message("user", (ImagePart(cmyk), ImagePart(PIXELS))),
    ))
    chat = to_vllm_chat(request)
    assert chat[:2] == [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello."}]
    first, second = chat[2]["content"]
    assert decode(first["image_url"]["url"]).tobytes() == cmyk.convert("RGB").tobytes()
    assert decode(second["image_url"]["url"]).tobytes() == PIXELS.tobytes()


def test_sampling_kwargs_follow_the_settings() -> None:
    assert to_sampling_kwargs(GenerationSettings()) == {"temperature": 0.0, "top_p": 1.0, "max_tokens": 64, "stop": []}
    sampled = GenerationSettings(max_new_tokens=5, temperature=0.7, top_p=0.9, stop=("\n", "."), seed=3)
    assert to_sampling_kwargs(sampled) == {"temperature": 0.7, "top_p": 0.9, "max_tokens": 5, "stop": ["\n", "."],
                                           "seed": 3}


def test_llm_kwargs_leave_vllm_defaults_where_asked() -> None:
    assert llm_kwargs(VLLMArgs(pretrained="m")) == {
        "model": "m", "dtype": "auto", "gpu_memory_utilization": 0.9, "tensor_parallel_size": 1, "seed": 0,
        "trust_remote_code": False, "limit_mm_per_prompt": {"image": 4}}
    kwargs = llm_kwargs(VLLMArgs(pretrained="m", max_model_len=4096, max_images=0))
    assert kwargs["max_model_len"] == 4096 and "limit_mm_per_prompt" not in kwargs


# -- building ---------------------------------------------------------------------------------


def test_missing_vllm_is_a_clear_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)
    assert MODELS.get("vllm") is VLLM
    with pytest.raises(ConfigError) as e:
        VLLM.from_args({"pretrained": "Qwen/Qwen2-VL-2B-Instruct"})
    assert str(e.value) == MISSING_VLLM == "--model vllm needs vLLM: pip install vllm (a CUDA machine)"


def test_pretrained_is_required_and_args_are_checked() -> None:
    with pytest.raises(ConfigError, match="pretrained"):
        VLLM.from_args({})
    with pytest.raises(ConfigError, match="did you mean max_images"):
        VLLM.from_args({"pretrained": "m", "max_image": "2"})


def test_llm_is_built_from_the_model_args(fake_vllm: types.ModuleType, tmp_path: Path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages }}")
    model = VLLM.from_args({"pretrained": "m", "dtype": "bfloat16", "max_model_len": "2048",
                            "max_images": "2", "chat_template": str(template)})
    assert FakeLLM.instances[0].kwargs == {
        "model": "m", "dtype": "bfloat16", "gpu_memory_utilization": 0.9, "tensor_parallel_size": 1, "seed": 0,
        "trust_remote_code": False, "max_model_len": 2048, "limit_mm_per_prompt": {"image": 2}}
    model.generate([ask("a", "hi")])
    assert FakeLLM.instances[0].calls[0]["chat_template"] == "{{ messages }}"
    fingerprint = model.fingerprint()
    assert fingerprint["pretrained"] == "m" and fingerprint["dtype"] == "bfloat16"
    assert fingerprint["vllm_version"] == "0.0.fake"
    assert fingerprint["chat_template_sha256"] == hashlib.sha256(b"{{ messages }}").hexdigest()
    assert fingerprint["settings"]["max_images"] == 2


# -- generate ---------------------------------------------------------------------------------


def test_generate_sends_all_requests_in_one_call_and_keeps_order(fake_vllm: types.ModuleType) -> None:
    model = VLLM.from_args({"pretrained": "m", "max_images": "1"})
    requests = [ask("a", "first?", images=1), ask("b", "too many", images=2), ask("c", "third?", max_new_tokens=3,
                                                                               stop=("!",)),
                ask("d", "none", max_new_tokens=0)]
    responses = model.generate(requests)
    llm = FakeLLM.instances[0]
    assert len(llm.calls) == 1
    call = llm.calls[0]
    assert call["use_tqdm"] is False and call["chat_template"] is None
    assert call["messages"] == [to_vllm_chat(requests[0]), to_vllm_chat(requests[2])]
    assert [p.kwargs for p in call["sampling_params"]] == [to_sampling_kwargs(requests[0].generation),
                                                          to_sampling_kwargs(requests[2].generation)]
    assert [r.request_id for r in responses] == ["a", "b", "c", "d"]
    assert responses[0].text == "re:" + "<user><img>first?</><assistant>"[-12:]
    assert responses[0].usage == {"prompt_tokens": len("<user><img>first?</><assistant>"), "completion_tokens": 15}
    assert responses[1].text is None and "2 images but max_images=1" in responses[1].error
    assert responses[2].text == "re:" + "<user>third?</><assistant>"[-12:] and responses[2].error is None
    assert responses[3].text == "" and responses[3].error is None


def test_a_failing_batch_is_retried_one_by_one_so_only_the_culprit_fails(fake_vllm: types.ModuleType) -> None:
    model = VLLM.from_args({"pretrained": "m"})
    responses = model.generate([ask("a", "fine"), ask("b", "BOOM"), ask("c", "also fine")])
    assert len(FakeLLM.instances[0].calls) == 1 + 3
    assert responses[0].text and responses[2].text
    assert responses[1].text is None and responses[1].error == "generation failed: ValueError: boom in this batch"


# -- loglikelihood ----------------------------------------------------------------------------


def expected(continuation: str) -> tuple[float, bool]:
    tokens = [ord(c) for c in continuation]
    return sum(token_logprob(t) for t in tokens), all(token_rank(t) == 1 for t in tokens)


def test_loglikelihood_sums_the_continuation_tokens_prompt_logprobs(fake_vllm: types.ModuleType) -> None:
    model = VLLM.from_args({"pretrained": "m"})
    request = Request(id="q", kind="loglikelihood", continuations=("cat", "ae", ""),
                      messages=(Message("user", (ImagePart(PIXELS), TextPart("Animal?"))),))
    other = Request(id="r", kind="loglikelihood", continuations=("dog",),
                    messages=(Message("user", (TextPart("Pet?"),)),))
    responses = model.loglikelihood([request, other])
    context_call, full_call = FakeLLM.instances[0].calls
    assert context_call["add_generation_prompt"] is True and context_call["continue_final_message"] is False
    assert full_call["add_generation_prompt"] is False and full_call["continue_final_message"] is True
    assert full_call["sampling_params"].kwargs == {"temperature": 0.0, "max_tokens": 1, "prompt_logprobs": 1}
    assert full_call["messages"][0] == [*to_vllm_chat(request), {"role": "assistant", "content": "cat"}]
    assert len(full_call["messages"]) == 3  # the empty continuation is not sent
    (cat, cat_greedy), (ae, ae_greedy) = expected("cat"), expected("ae")
    assert responses[0].logprobs == pytest.approx([cat, ae, 0.0])
    assert responses[0].is_greedy == [cat_greedy, ae_greedy, True] == [False, True, True]
    assert responses[0].usage == {"prompt_tokens": len("<user><img>Animal?</><assistant>")}
    assert responses[1].logprobs == pytest.approx([expected("dog")[0]]) and responses[1].error is None


def test_loglikelihood_refuses_a_context_that_changes_when_the_continuation_is_added(
        fake_vllm: types.ModuleType) -> None:
    model = VLLM.from_args({"pretrained": "m"})
    drifting = Request(id="d", kind="loglikelihood", continuations=("DRIFT",),
                       messages=(Message("user", (TextPart("Say"),)),))
    fine = Request(id="f", kind="loglikelihood", continuations=("yes",),
                   messages=(Message("user", (TextPart("Say"),)),))
    responses = model.loglikelihood([drifting, fine])
    assert responses[0].logprobs is None and "rendered the context differently" in responses[0].error
    assert responses[1].logprobs == pytest.approx([expected("yes")[0]])
