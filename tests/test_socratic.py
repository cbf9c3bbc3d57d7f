"""The `socratic` model: real EfficientNet-Lite0 tags and RapidOCR on real photos, with a tiny LM
(and, marked slow, the real SmolLM2)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import skimage.data
from PIL import Image, ImageDraw, ImageFont

from fastmmeval.errors import ConfigError
from fastmmeval.models.base import MODELS
from fastmmeval.models.socratic.socratic import Socratic, SocraticArgs
from fastmmeval.protocol import GenerationSettings, ImagePart, Message, Request, TextPart

CHELSEA = Image.fromarray(skimage.data.chelsea())
ROCKET = Image.fromarray(skimage.data.rocket())
OPTIONS = ("cat", "rocket", "coffee", "horse")


def sign(text: str) -> Image.Image:
    image = Image.new("RGB", (320, 90), "white")
    ImageDraw.Draw(image).text((12, 20), text, fill="black", font=ImageFont.load_default(size=40))
    return image


def ask(rid: str, image: Image.Image, question: str = "What animal is in this image? Answer with one word.",
        kind: str = "generate", continuations: tuple[str, ...] = ()) -> Request:
    return Request(id=rid, kind=kind, messages=(Message("user", (ImagePart(image), TextPart(question))),),
                   generation=GenerationSettings(max_new_tokens=8), continuations=continuations)


@pytest.fixture(scope="module")
def model(tiny_lm_dir: Path) -> Socratic:
    return Socratic(SocraticArgs(lm=str(tiny_lm_dir), max_batch_size=2))


def test_images_become_descriptions_from_real_tags_and_ocr(model: Socratic) -> None:
    chat = model.chat(ask("q", CHELSEA).messages)
    assert chat[0] == {"role": "system", "content": model.args.system_prompt}
    description, question = chat[1]["content"].split("\n")
    assert description.startswith("[Image: a photo of ") and "cat" in description
    assert question == "What animal is in this image? Answer with one word."
    assert 'text in the image: "STOP 42"' in model.describe(sign("STOP 42"))


def test_text_around_images_is_kept_and_text_only_turns_are_untouched(model: Socratic) -> None:
    messages = (
        Message("system", (TextPart("Be brief. "),)),
        Message("user", (TextPart("Compare "), ImagePart(CHELSEA), TextPart("\nwith"), ImagePart(ROCKET))),
        Message("assistant", (TextPart(" A"),)),
    )
    chat = model.chat(messages)
    cat, rocket = model.describe(CHELSEA), model.describe(ROCKET)
    assert chat == [{"role": "system", "content": "Be brief. "},
                    {"role": "user", "content": f"Compare\n{cat}\nwith\n{rocket}"},
                    {"role": "assistant", "content": " A"}]


def test_generate_answers_every_request_in_order(model: Socratic) -> None:
    requests = [ask("a", CHELSEA), ask("b", ROCKET), ask("c", CHELSEA, "Describe it."), ask("d", ROCKET, "Why?"),
                ask("a", CHELSEA, "Yes or no?")]
    responses = model.generate(requests)
    assert [r.request_id for r in responses] == ["a", "b", "c", "d", "a"]
    for response in responses:
        assert response.error is None and isinstance(response.text, str)
        assert response.usage["prompt_tokens"] > 10
    # Batching does not change greedy answers.
    assert [r.text for r in responses] == [model.generate([q])[0].text for q in requests]


def test_loglikelihood_scores_each_continuation(model: Socratic) -> None:
    requests = [ask("a", CHELSEA, kind="loglikelihood", continuations=OPTIONS),
                ask("b", ROCKET, kind="loglikelihood", continuations=("yes", "no"))]
    responses = model.loglikelihood(requests)
    assert [len(r.logprobs or []) for r in responses] == [4, 2]
    assert [len(r.is_greedy or []) for r in responses] == [4, 2]
    assert all(math.isfinite(x) and x < 0 for r in responses for x in r.logprobs or [])
    chat = model.chat(requests[0].messages)
    assert responses[0].logprobs == model.lm.loglikelihood(chat, list(OPTIONS))[0]


def test_each_image_is_described_once(model: Socratic, monkeypatch: pytest.MonkeyPatch) -> None:
    image = Image.fromarray(skimage.data.coffee())
    same_pixels = Image.fromarray(skimage.data.coffee())
    calls: list[Image.Image] = []
    describe = model._describe
    monkeypatch.setattr(model, "_describe", lambda im: calls.append(im) or describe(im))
    model.generate([ask("a", image), ask("b", same_pixels, "What is it?")])
    model.loglikelihood([ask("c", image, kind="loglikelihood", continuations=OPTIONS)])
    assert len(calls) == 1


def test_a_failing_image_fails_only_its_own_request(model: Socratic, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = sign("broken")
    assert model.reader is not None
    read = model.reader.read

    def flaky_read(image: Image.Image) -> list[tuple[str, float]]:
        if image is broken:
            raise RuntimeError("onnxruntime exploded")
        return read(image)

    monkeypatch.setattr(model.reader, "read", flaky_read)
    responses = model.generate([ask("a", CHELSEA), ask("b", broken), ask("c", ROCKET)])
    assert responses[1].text is None
    assert responses[1].error == "describing the image(s) failed: RuntimeError: onnxruntime exploded"
    assert [r.error for r in (responses[0], responses[2])] == [None, None]
    scored = model.loglikelihood([ask("d", broken, kind="loglikelihood", continuations=OPTIONS),
                                  ask("e", CHELSEA, kind="loglikelihood", continuations=OPTIONS)])
    assert scored[0].logprobs is None and "onnxruntime exploded" in (scored[0].error or "")
    assert scored[1].error is None and len(scored[1].logprobs or []) == 4


def test_a_failing_lm_call_fails_only_its_own_request(model: Socratic, monkeypatch: pytest.MonkeyPatch) -> None:
    generate = model.lm.generate

    def picky_generate(prompts: list, settings: list) -> list[str]:
        if any("BOOM" in m["content"] for p in prompts for m in p):
            raise ValueError("sequence too long")
        return generate(prompts, settings)

    monkeypatch.setattr(model.lm, "generate", picky_generate)
    responses = model.generate([ask("a", CHELSEA), ask("b", CHELSEA, "BOOM"), ask("c", ROCKET)])
    assert [r.error for r in responses] == [None, "generation failed: ValueError: sequence too long", None]
    assert responses[0].text is not None and responses[1].text is None


def test_fingerprint_covers_lm_tagger_ocr_and_settings(model: Socratic, tiny_lm_dir: Path) -> None:
    fp = model.fingerprint()
    assert fp["lm"]["lm"] == str(tiny_lm_dir)
    assert fp["tagger"]["checkpoint"] == "efficientnet-lite0-57934424.pth"
    assert set(fp["ocr"]["models"]) == {"ch_PP-OCRv4_det_infer.onnx", "ch_PP-OCRv4_rec_infer.onnx",
                                        "ch_ppocr_mobile_v2.0_cls_infer.onnx"}
    assert fp["settings"]["tags"] == model.args.tags
    assert fp == model.fingerprint()


def test_built_from_model_args_through_the_registry(tiny_lm_dir: Path) -> None:
    model = MODELS.get("socratic").from_args({"lm": str(tiny_lm_dir), "tags": "2", "ocr": "false",
                                              "system_prompt": ""})
    assert isinstance(model, Socratic)
    assert model.reader is None and model.fingerprint()["ocr"] is None
    chat = model.chat(ask("q", CHELSEA).messages)
    assert [m["role"] for m in chat] == ["user"]
    assert chat[0]["content"].count(" or ") == 1 and "text in the image" not in chat[0]["content"]
    with pytest.raises(ConfigError, match="unknown argument 'tag'"):
        MODELS.get("socratic").from_args({"lm": str(tiny_lm_dir), "tag": "2"})


def test_missing_lm_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot load causal LM"):
        Socratic(SocraticArgs(lm=str(tmp_path / "nowhere"), ocr=False))


@pytest.mark.slow
def test_real_smollm2_sees_the_cat() -> None:
    model = Socratic(SocraticArgs())
    answer = model.generate([ask("cat", CHELSEA)])[0]
    assert answer.error is None and "cat" in (answer.text or "").lower()
    scored = model.loglikelihood([ask("cat", CHELSEA, "What is in this image? Answer with one word.",
                                      kind="loglikelihood", continuations=OPTIONS)])[0]
    assert scored.error is None and scored.logprobs is not None
    assert max(range(len(OPTIONS)), key=scored.logprobs.__getitem__) == OPTIONS.index("cat")
