"""`hf`: a transformers model served by the in-process continuous-batching engine.

A checkpoint that `AutoModelForImageTextToText` loads (LLaVA, Qwen2-VL, Idefics3, SmolVLM, ...) runs
as a VisionLanguageModel: each request goes through the model's own chat template and processor,
and the engine prefills new rows with that model's inputs and positions (M-RoPE included). Any
other runs as a text-only CausalLM, and a request with images is answered with an error, never
with the images silently dropped.

Prompts (image preprocessing included) are built by `prepare`, which the evaluator calls from its
background pool ahead of each batch, so preprocessing overlaps the previous batch's compute;
requests that did not go through `prepare` are built in a small thread pool when their call starts.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from fastmmeval.errors import ConfigError
from fastmmeval.models.base import MODELS, Model, each_or_alone, failure_reason
from fastmmeval.protocol import Request, Response

if TYPE_CHECKING:
    from fastmmeval.engine.engine import Engine
    from fastmmeval.engine.runner import Batch
    from fastmmeval.engine.sequence import Sequence
    from fastmmeval.models.causal_lm import CausalLM
    from fastmmeval.models.vlm import Prompt, VisionLanguageModel

# Threads building prompts (chat template, tokenizer, image processor) for one call.
PREPROCESS_WORKERS = 2


@dataclass
class HFArgs:
    """`--model_args` of `hf`.

    pretrained: a local folder or hub id for from_pretrained.
    dtype: float32, bfloat16 or float16.
    attn_implementation: e.g. sdpa, eager, flash_attention_2 ("" keeps transformers' default).
    max_batch_size: sequences decoded together (and continuations scored together).
    max_batch_tokens: tokens fed to the model in one step (prefill padding included).
    gguf_file: a GGUF file inside `pretrained` (text-only models).
    device: where the model runs: cpu, cuda, cuda:N.
    """

    pretrained: str
    dtype: str = "float32"
    attn_implementation: str = ""
    max_batch_size: int = 16
    max_batch_tokens: int = 4096
    gguf_file: str = ""
    device: str = "cpu"


@MODELS.register("hf")
class HF(Model):
    """A chat model from transformers, text-only or vision-language; generation by continuous
    batching, scoring with a shared-context cache."""

    name = "hf"
    Args = HFArgs

    def __init__(self, args: HFArgs) -> None:
        where = "--model_args for model 'hf'"
        if args.max_batch_size < 1 or args.max_batch_tokens < 1:
            raise ConfigError(f"{where}: max_batch_size and max_batch_tokens must be at least 1")
        from fastmmeval.engine.engine import Engine
        from fastmmeval.models.causal_lm import CausalLM
        from fastmmeval.models.vlm import VisionLanguageModel, is_vision_language

        self.args = args
        self._ready: dict[str, tuple[list[int], Prompt | None] | str] = {}
        self.vision = not args.gguf_file and is_vision_language(args.pretrained)
        self.lm: CausalLM | VisionLanguageModel
        if self.vision:
            self.lm = VisionLanguageModel(args.pretrained, dtype=args.dtype, batch_size=args.max_batch_size)
            self.engine: Engine = Engine(self.lm.model, self.lm.eos_ids,
                                         partial(self.lm.tokenizer.decode, skip_special_tokens=True),
                                         partial(_collate_prompts, self.lm), max_batch_size=args.max_batch_size,
                                         max_batch_tokens=args.max_batch_tokens)
        else:
            self.lm = CausalLM(args.pretrained, gguf_file=args.gguf_file, dtype=args.dtype,
                               batch_size=args.max_batch_size, max_batch_tokens=args.max_batch_tokens)
            self.engine = self.lm.engine
        if args.attn_implementation:
            try:
                self.lm.model.set_attn_implementation(args.attn_implementation)
            except (ValueError, ImportError) as e:
                raise ConfigError(f"{where}: attn_implementation: {failure_reason('unavailable', e)}") from None
        self.lm.model.to(_device(args.device, where))
        config = self.lm.model.config
        self.arch = (getattr(config, "architectures", None) or [type(self.lm.model).__name__])[0]

    @staticmethod
    def _chat(request: Request) -> list[dict[str, str]]:
        return [{"role": m.role, "content": m.text} for m in request.messages]

    def build_prompt(self, request: Request) -> tuple[list[int], Prompt | None] | str:
        """The request's prompt ids and the other prefill inputs that go with them (a
        vision-language Prompt; None for text), or why there are none."""
        if self.vision:
            try:
                prompt = self.lm.prompt(request)
            except Exception as e:  # any failure belongs to this request only
                return failure_reason("building the prompt failed", e)
            return prompt.ids, prompt
        if request.images:
            return f"hf backend: {self.arch} is a text-only model; it cannot take image inputs"
        try:
            return self.lm.chat_ids(self._chat(request)), None
        except Exception as e:
            return failure_reason("building the prompt failed", e)

    def prepare(self, request: Request) -> None:
        """Build the request's prompt (chat template, tokenizer, image processor) now, ahead of
        its batch; `generate`/`loglikelihood` then take it instead of building it again."""
        self._ready[request.id] = self.build_prompt(request)

    def _prompts(self, requests: list[Request]) -> list[tuple[list[int], Prompt | None] | str]:
        """`build_prompt` of each request: the one `prepare` built, else built now in a thread pool."""
        ready = [self._ready.pop(r.id, None) for r in requests]
        missing = [r for r, built in zip(requests, ready, strict=True) if built is None]
        with ThreadPoolExecutor(PREPROCESS_WORKERS, thread_name_prefix="hf-prompt") as pool:
            built_now = iter(pool.map(self.build_prompt, missing))
        return [built if built is not None else next(built_now) for built in ready]

    def generate(self, requests: list[Request]) -> list[Response]:
        """One Response with the model's reply (or the reason it failed) per request."""
        responses = [Response(request_id=r.id) for r in requests]
        ready: list[tuple[int, list[int], Prompt | None]] = []
        for i, built in enumerate(self._prompts(requests)):
            if isinstance(built, str):
                responses[i].error = built
            else:
                ready.append((i, *built))
        seqs = each_or_alone(
            lambda part: self.engine.generate([(ids, requests[i].generation, inputs) for i, ids, inputs in part]), ready
        )
        for (i, ids, _), seq in zip(ready, seqs, strict=True):
            if isinstance(seq, Exception):
                responses[i].error = failure_reason("generation failed", seq)
            else:
                responses[i].text = seq.text
                responses[i].usage = {"prompt_tokens": len(ids), "completion_tokens": len(seq.output_ids)}
        return responses

    def loglikelihood(self, requests: list[Request]) -> list[Response]:
        """One Response with per-continuation log-probabilities (or the reason it failed) per
        request; each request's shared context runs once."""
        out = []
        for request, built in zip(requests, self._prompts(requests), strict=True):
            response = Response(request_id=request.id)
            out.append(response)
            if isinstance(built, str):
                response.error = built
                continue
            ids, prompt = built
            try:
                if prompt is not None:
                    scored = self.lm.loglikelihood(request, prompt=prompt)
                else:
                    scored = self.lm.loglikelihood(self._chat(request), list(request.continuations))
                response.logprobs, response.is_greedy = scored
                response.usage = {"prompt_tokens": len(ids)}
            except Exception as e:
                response.error = failure_reason("scoring failed", e)
        return out

    def fingerprint(self) -> dict[str, Any]:
        """The model and the settings that can change its outputs (batch limits cannot: greedy
        outputs are batch invariant)."""
        settings = asdict(self.args)
        for batch_only in ("max_batch_size", "max_batch_tokens"):
            settings.pop(batch_only)
        return {"model": self.name, "lm": self.lm.fingerprint(), "settings": settings}


def _collate_prompts(vlm: VisionLanguageModel, seqs: list[Sequence]) -> Batch:
    """The engine's prefill builder for a vision-language model: its batch of the sequences' prompts."""
    return vlm.collate([s.inputs for s in seqs])


def _device(name: str, where: str) -> Any:
    """The torch device `name`, checked to exist on this machine."""
    import torch

    try:
        device = torch.device(name)
    except RuntimeError as e:
        raise ConfigError(f"{where}: device {name!r}: {e}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{where}: device {name!r} asked for, but torch sees no CUDA device here")
    return device
