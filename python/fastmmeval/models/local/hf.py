"""`hf`: a transformers model served by the in-process continuous-batching engine.

A checkpoint that `AutoModelForImageTextToText` loads (LLaVA, Qwen2-VL, Idefics3, SmolVLM, ...) runs
as a VisionLanguageModel: each request goes through the model's own chat template and processor,
and the engine prefills new rows with that model's inputs and positions (M-RoPE included). Any
other runs as a text-only CausalLM, and a request with images is answered with an error, never
with the images silently dropped.

Prompts (image preprocessing included) are built by `prepare`, which the evaluator calls from its
background pool ahead of the engine, so preprocessing overlaps compute; a request that did not go
through `prepare` is built when the engine takes it. The evaluator hands all of a task's requests
over as one stream (`respond`), so the engine's batch stays full from the first doc to the last.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from functools import partial
from itertools import groupby
from typing import TYPE_CHECKING, Any

from fastmmeval.errors import ConfigError
from fastmmeval.models.base import MODELS, Model, failure_reason
from fastmmeval.protocol import GenerationSettings, Request, Response

if TYPE_CHECKING:
    from fastmmeval.engine.engine import Engine
    from fastmmeval.engine.runner import Batch
    from fastmmeval.engine.sequence import Sequence
    from fastmmeval.models.local.causal_lm import CausalLM
    from fastmmeval.models.local.vlm import Prompt, VisionLanguageModel

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
    prune: skip work whose result is never read (vision layers after the one the model reads, the
        final decoder layer's query projection, MLP and output projection off the last position in
        prefills), each cut checked at load to leave outputs unchanged (`engine.pruning`); false
        runs the checkpoint's forward as is.
    onednn: on CPU, run the linear layers through oneDNN's inner product instead of MKL's GEMM
        (`engine.cpu_linear`; faster, equal up to float rounding, each layer checked at load).
    """

    pretrained: str
    dtype: str = "float32"
    attn_implementation: str = ""
    max_batch_size: int = 16
    max_batch_tokens: int = 4096
    gguf_file: str = ""
    device: str = "cpu"
    prune: bool = True
    onednn: bool = True


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
        from fastmmeval.models.local.causal_lm import CausalLM
        from fastmmeval.models.local.vlm import VisionLanguageModel, is_vision_language

        self.args = args
        self._ready: dict[str, tuple[list[int], Prompt | None] | str] = {}
        self.vision = not args.gguf_file and is_vision_language(args.pretrained)
        self.lm: CausalLM | VisionLanguageModel
        if self.vision:
            self.lm = VisionLanguageModel(args.pretrained, dtype=args.dtype, batch_size=args.max_batch_size,
                                          prune=args.prune)
            self.engine: Engine = Engine(self.lm.model, self.lm.eos_ids,
                                         partial(self.lm.tokenizer.decode, skip_special_tokens=True),
                                         partial(_collate_prompts, self.lm), max_batch_size=args.max_batch_size,
                                         max_batch_tokens=args.max_batch_tokens)
        else:
            self.lm = CausalLM(args.pretrained, gguf_file=args.gguf_file, dtype=args.dtype,
                               batch_size=args.max_batch_size, max_batch_tokens=args.max_batch_tokens,
                               prune=args.prune)
            self.engine = self.lm.engine
        if args.attn_implementation:
            try:
                self.lm.model.set_attn_implementation(args.attn_implementation)
            except (ValueError, ImportError) as e:
                raise ConfigError(f"{where}: attn_implementation: {failure_reason('unavailable', e)}") from None
        device = self.device = _device(args.device, where)
        self.lm.model.to(device)
        if args.onednn and device.type == "cpu":
            from fastmmeval.engine.cpu_linear import use_onednn_linear

            use_onednn_linear(self.lm.model)
        config = self.lm.model.config
        self.arch = (getattr(config, "architectures", None) or [type(self.lm.model).__name__])[0]

    def overlaps_input_work(self) -> bool:
        """On CPU, only where torch's threads (times this machine's ranks) leave cores free:
        measured on the engine bench, preparing docs beside CPU matrix products that use every
        core made generation slower than preparing them while the engine waits."""
        import torch

        from fastmmeval.util import available_cores

        if self.device.type != "cpu":
            return True
        ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        return torch.get_num_threads() * ranks_here < available_cores()

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

    def _prompt(self, request: Request) -> tuple[list[int], Prompt | None] | str:
        """`build_prompt` of the request: the one `prepare` built, else built now."""
        built = self._ready.pop(request.id, None)
        return self.build_prompt(request) if built is None else built

    def respond(self, requests: Iterable[Request], batch_size: int) -> Iterator[Response]:
        """Each request's Response as soon as it is ready: generation requests stream through the
        continuous-batching engine, which takes new ones as rows free up (whatever `batch_size`
        the caller groups by); log-likelihood requests are scored one by one as they come."""
        for kind, group in groupby(requests, key=lambda r: r.kind):
            if kind != "generate":
                for request in group:
                    yield from self.loglikelihood([request])
                continue
            unbuilt: deque[Response] = deque()  # prompts that could not be built, answered in passing
            for request, seq in self.engine.stream(self._engine_prompts(group, unbuilt),
                                                   window=self.args.max_batch_size):
                yield from _drain(unbuilt)
                yield _generated(request, seq)
            yield from _drain(unbuilt)

    def _engine_prompts(self, requests: Iterable[Request], unbuilt: deque[Response]
                        ) -> Iterator[tuple[Request, list[int], GenerationSettings, Prompt | None]]:
        """The engine's (key, prompt ids, settings, prefill inputs) for each request whose prompt
        can be built; a Response with the reason for each one whose prompt cannot."""
        for request in requests:
            built = self._prompt(request)
            if isinstance(built, str):
                unbuilt.append(Response(request_id=request.id, error=built))
            else:
                yield request, built[0], request.generation, built[1]

    def generate(self, requests: list[Request]) -> list[Response]:
        """One Response with the model's reply (or the reason it failed) per request."""
        by_id = {r.request_id: r for r in self.respond(requests, len(requests))}
        return [by_id[r.id] for r in requests]

    def loglikelihood(self, requests: list[Request]) -> list[Response]:
        """One Response with per-continuation log-probabilities (or the reason it failed) per
        request; each request's shared context runs once."""
        out = []
        for request in requests:
            built = self._prompt(request)
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
        outputs are batch invariant; nor can pruning, checked exact at load, nor the CPU matrix
        product library, which changes float rounding only, as batch shapes do)."""
        settings = asdict(self.args)
        for same_outputs in ("max_batch_size", "max_batch_tokens", "prune", "onednn"):
            settings.pop(same_outputs)
        return {"model": self.name, "lm": self.lm.fingerprint(), "settings": settings}


def _generated(request: Request, seq: Sequence | Exception) -> Response:
    """The Response for a finished generation (or the exception that failed it)."""
    if isinstance(seq, Exception):
        return Response(request_id=request.id, error=failure_reason("generation failed", seq))
    return Response(request_id=request.id, text=seq.text,
                    usage={"prompt_tokens": len(seq.prompt_ids), "completion_tokens": len(seq.output_ids)})


def _drain(responses: deque[Response]) -> Iterator[Response]:
    while responses:
        yield responses.popleft()


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
