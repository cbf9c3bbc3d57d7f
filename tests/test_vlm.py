"""VisionLanguageModel on tiny random-weight LLaVA, Qwen2-VL, Idefics3 and SmolVLM checkpoints loaded
by path: each model's own chat template and processor, and prefix-shared log-likelihoods equal to
naive full forwards. (Generation runs in the engine: tests/test_hf_vlm.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image
from vlm_fixtures import BUILDERS

from fastmmeval.models.local.vlm import VisionLanguageModel, is_vision_language
from fastmmeval.protocol import GenerationSettings, ImagePart, Message, Request, TextPart

MODEL_CLASSES = {"llava": "LlavaForConditionalGeneration", "qwen2_vl": "Qwen2VLForConditionalGeneration",
                 "idefics3": "Idefics3ForConditionalGeneration", "smolvlm": "SmolVLMForConditionalGeneration"}
TEMPLATE_MARKS = {"llava": ("USER: <image>\n", "ASSISTANT:"),
                  "qwen2_vl": ("<|vision_start|><|image_pad|><|vision_end|>", "<|im_start|>assistant\n"),
                  "idefics3": ("<|begin_of_text|>User:<image>", "Assistant:"),
                  "smolvlm": ("<|im_start|>User:<image>", "Assistant:")}
MAX_NEW = 10


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def vlm(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, VisionLanguageModel]:
    """(architecture, model) built into a temp folder and loaded by its path."""
    folder = BUILDERS[request.param](tmp_path_factory.mktemp(request.param))
    return request.param, VisionLanguageModel(str(Path(folder)), dtype="float32")


@pytest.fixture(scope="module")
def photos() -> list[Image.Image]:
    """Real photos from scikit-image, resized small to different shapes."""
    from skimage import data

    names_sizes = [("astronaut", (48, 40)), ("chelsea", (30, 60)), ("coffee", (64, 48)), ("rocket", (28, 56)),
                   ("camera", (40, 40)), ("coins", (56, 30))]
    return [Image.fromarray(getattr(data, name)()).convert("RGB").resize(size) for name, size in names_sizes]


QUESTIONS = ["What is this?", "Describe the picture in a few words, please.", "Is there a cat?",
             "How many coins are there in the image? Answer with a number from 0 to 9.", "Yes or no?",
             "The quick brown fox jumps over the lazy dog. What animal is in this image? Answer with one word."]


def _requests(photos: list[Image.Image]) -> list[Request]:
    """16 generate requests with mixed prompt lengths, 0-2 images (before or after the text), system
    and multi-turn chats."""
    out = []
    for i in range(16):
        n_images = (0, 1, 1, 2)[i % 4]
        images = tuple(ImagePart(photos[(i + k) % len(photos)], ref=f"p{(i + k) % len(photos)}")
                       for k in range(n_images))
        question = TextPart(QUESTIONS[i % len(QUESTIONS)] + " cat" * (i % 3))
        user = Message("user", (question, *images) if i % 3 == 2 else (*images, question))
        messages: tuple[Message, ...] = (user,)
        if i % 5 == 1:
            messages = (Message("system", (TextPart("You answer questions about images."),)), user)
        if i % 7 == 3:
            messages = (user, Message("assistant", (TextPart("A cat."),)), Message("user", (TextPart("Why?"),)))
        out.append(Request(id=str(i), kind="generate", messages=messages,
                           generation=GenerationSettings(max_new_tokens=MAX_NEW)))
    return out


def _reference_tokens(model: VisionLanguageModel, request: Request, max_new_tokens: int = MAX_NEW) -> list[int]:
    """transformers `generate` (greedy) on the request alone, from the processor's own outputs,
    without the final EOS."""
    prompt = model.prompt(request)
    inputs = {"input_ids": torch.tensor([prompt.ids]),
              "attention_mask": torch.ones(1, len(prompt.ids), dtype=torch.long), **prompt.images}
    if prompt.mm_token_type_ids is not None:
        inputs["mm_token_type_ids"] = torch.tensor([prompt.mm_token_type_ids])
    with torch.inference_mode():
        out = model.model.generate(**inputs, do_sample=False, max_new_tokens=max_new_tokens,
                                   eos_token_id=sorted(model.eos_ids), pad_token_id=model.pad_id)
    tokens = out[0, len(prompt.ids):].tolist()
    for k, token in enumerate(tokens):
        if token in model.eos_ids:
            return tokens[:k]
    return tokens


def test_loads_by_path_with_own_template(vlm: tuple[str, VisionLanguageModel], photos: list[Image.Image]) -> None:
    arch, model = vlm
    assert type(model.model).__name__ == MODEL_CLASSES[arch]
    assert is_vision_language(model.name_or_path)
    request = Request(id="t", kind="generate",
                      messages=(Message("user", (ImagePart(photos[0]), TextPart("What is this?"))),))
    text, images = model.chat_text(request)
    assert all(mark in text for mark in TEMPLATE_MARKS[arch]), text
    assert len(images) == 1
    prompt = model.prompt(request)
    # The single placeholder was expanded to several image tokens, as the model's encoder needs.
    assert prompt.ids.count(model.image_token_id) > 1
    assert prompt.images


def test_text_only_checkpoint_is_not_vision_language(tiny_lm_dir: Path) -> None:
    assert not is_vision_language(str(tiny_lm_dir))


def test_tiled_prompt_without_processor_equals_processor(tmp_path: Path, photos: list[Image.Image]) -> None:
    """The processor-free path (used where the processor needs torchvision, as SmolVLM's does)
    gives exactly what Idefics3Processor gives."""
    model = VisionLanguageModel(str(BUILDERS["idefics3"](tmp_path)))
    assert model.processor is not None
    for request in _requests(photos)[:4]:
        with_processor = model.prompt(request)
        processor, model.processor = model.processor, None
        try:
            without = model.prompt(request)
        finally:
            model.processor = processor
        assert without.ids == with_processor.ids
        assert sorted(without.images) == sorted(with_processor.images)
        for key, value in with_processor.images.items():
            assert torch.equal(without.images[key], value), key


def _naive_loglikelihood(model: VisionLanguageModel, request: Request, continuation: str) -> tuple[float, bool]:
    """One full forward over prompt + continuation (positions left to the model itself)."""
    prompt = model.prompt(request)
    cont = model.text_ids(continuation)
    ids = prompt.ids + cont
    inputs = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
              **prompt.images}
    if prompt.mm_token_type_ids is not None:
        inputs["mm_token_type_ids"] = torch.tensor([prompt.mm_token_type_ids + [0] * len(cont)])
    with torch.inference_mode():
        logits = model.model(**inputs).logits[0].float().log_softmax(-1)
    dist = logits[len(prompt.ids) - 1: len(ids) - 1]
    tokens = torch.tensor(cont)
    return float(dist.gather(1, tokens[:, None]).sum()), bool((dist.argmax(-1) == tokens).all())


def _greedy_text(model: VisionLanguageModel, request: Request) -> str | None:
    """The model's own greedy reply, cut where its text still tokenizes back to the same ids
    (random byte-level models often start with a lone byte, which does not)."""
    tokens = _reference_tokens(model, request, max_new_tokens=4)
    for k in range(len(tokens), 0, -1):
        text = model.tokenizer.decode(tokens[:k])
        if model.text_ids(text) == tokens[:k]:
            return text
    return None


def test_loglikelihood_prefix_shared_equals_naive(vlm: tuple[str, VisionLanguageModel],
                                                  photos: list[Image.Image]) -> None:
    _, model = vlm
    model.batch_size = 2
    options = ["cat", "a dog sat on the mat", "moon", "Yes", "0 1 2 3"]
    requests = _requests(photos)
    cases = [(requests[i], options) for i in (0, 2, 3)]
    # A request whose greedy reply survives a text round trip, so that is_greedy is seen true
    # (the tiny Qwen2-VL and SmolVLM always open with a lone byte token and have none).
    greedy_row = next(((i, t) for i, r in enumerate(requests[:8]) if (t := _greedy_text(model, r))), None)
    if greedy_row is not None:
        cases.append((requests[greedy_row[0]], [greedy_row[1], "cat"]))
    for request, conts in cases:
        logprobs, is_greedy = model.loglikelihood(request, conts)
        for cont, lp, greedy in zip(conts, logprobs, is_greedy, strict=True):
            naive_lp, naive_greedy = _naive_loglikelihood(model, request, cont)
            assert abs(lp - naive_lp) < 1e-4, (request.id, cont, lp, naive_lp)
            assert greedy == naive_greedy
        assert len(set(logprobs)) == len(logprobs)
    if greedy_row is not None:
        assert model.loglikelihood(*cases[-1])[1][0]
