"""`hf`: a transformers causal LM served by the in-process continuous-batching engine.

Text-only for now: a request with images is answered with an error, never with the images
silently dropped.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from fastmmeval.errors import ConfigError
from fastmmeval.models.base import MODELS, Model
from fastmmeval.models.socratic import _reason
from fastmmeval.protocol import Request, Response

if TYPE_CHECKING:
    from fastmmeval.engine.engine import Engine
    from fastmmeval.engine.sequence import Sequence
    from fastmmeval.models.causal_lm import CausalLM


@dataclass
class HFArgs:
    """`--model_args` of `hf`.

    pretrained: a local folder or hub id for from_pretrained.
    dtype: float32, bfloat16 or float16.
    attn_implementation: e.g. sdpa, eager, flash_attention_2 ("" keeps transformers' default).
    max_batch_size: sequences decoded together.
    max_batch_tokens: tokens fed to the model in one step (prefill padding included).
    gguf_file: a GGUF file inside `pretrained`.
    """

    pretrained: str
    dtype: str = "float32"
    attn_implementation: str = ""
    max_batch_size: int = 16
    max_batch_tokens: int = 4096
    gguf_file: str = ""


@MODELS.register("hf")
class HF(Model):
    """A chat causal LM from transformers; generation by continuous batching, scoring with a
    shared-context cache."""

    name = "hf"
    Args = HFArgs

    def __init__(self, args: HFArgs) -> None:
        where = "--model_args for model 'hf'"
        if args.max_batch_size < 1 or args.max_batch_tokens < 1:
            raise ConfigError(f"{where}: max_batch_size and max_batch_tokens must be at least 1")
        from fastmmeval.engine.engine import Engine
        from fastmmeval.models.causal_lm import CausalLM

        self.args = args
        self.lm: CausalLM = CausalLM(args.pretrained, gguf_file=args.gguf_file, dtype=args.dtype,
                                     batch_size=args.max_batch_size)
        if args.attn_implementation:
            try:
                self.lm.model.set_attn_implementation(args.attn_implementation)
            except (ValueError, ImportError) as e:
                raise ConfigError(f"{where}: attn_implementation: {_reason('unavailable', e)}") from None
        config = self.lm.model.config
        self.arch = (getattr(config, "architectures", None) or [type(self.lm.model).__name__])[0]
        self.engine: Engine = Engine(self.lm.model, self.lm.eos_ids, self.lm.pad_id,
                                     partial(self.lm.tokenizer.decode, skip_special_tokens=True),
                                     max_batch_size=args.max_batch_size, max_batch_tokens=args.max_batch_tokens)

    def _refusal(self, request: Request) -> str | None:
        """Why this backend cannot answer `request`, or None."""
        if request.images:
            return f"hf backend: image inputs are not supported yet for {self.arch}"
        return None

    @staticmethod
    def _chat(request: Request) -> list[dict[str, str]]:
        return [{"role": m.role, "content": m.text} for m in request.messages]

    def generate(self, requests: list[Request]) -> list[Response]:
        """One Response with the model's reply (or the reason it failed) per request."""
        responses = [Response(request_id=r.id) for r in requests]
        ready: list[tuple[int, list[int]]] = []
        for i, request in enumerate(requests):
            if refusal := self._refusal(request):
                responses[i].error = refusal
                continue
            try:
                ready.append((i, self.lm.chat_ids(self._chat(request))))
            except Exception as e:  # any failure belongs to this request only
                responses[i].error = _reason("building the prompt failed", e)
        try:
            seqs = self.engine.generate([(ids, requests[i].generation) for i, ids in ready])
        except Exception:  # retried one by one: only the culprit fails
            seqs = [self._generate_one(ids, requests[i]) for i, ids in ready]
        for (i, ids), seq in zip(ready, seqs, strict=True):
            if isinstance(seq, Exception):
                responses[i].error = _reason("generation failed", seq)
            else:
                responses[i].text = seq.text
                responses[i].usage = {"prompt_tokens": len(ids), "completion_tokens": len(seq.output_ids)}
        return responses

    def _generate_one(self, ids: list[int], request: Request) -> Sequence | Exception:
        try:
            return self.engine.generate([(ids, request.generation)])[0]
        except Exception as e:
            return e

    def loglikelihood(self, requests: list[Request]) -> list[Response]:
        """One Response with per-continuation log-probabilities (or the reason it failed) per
        request."""
        out = []
        for request in requests:
            response = Response(request_id=request.id)
            out.append(response)
            if refusal := self._refusal(request):
                response.error = refusal
                continue
            try:
                chat = self._chat(request)
                response.logprobs, response.is_greedy = self.lm.loglikelihood(chat, list(request.continuations))
                response.usage = {"prompt_tokens": len(self.lm.chat_ids(chat))}
            except Exception as e:
                response.error = _reason("scoring failed", e)
        return out

    def fingerprint(self) -> dict[str, Any]:
        """The model and the settings that can change its outputs (batch limits cannot: greedy
        outputs are batch invariant)."""
        settings = asdict(self.args)
        for batch_only in ("max_batch_size", "max_batch_tokens"):
            settings.pop(batch_only)
        return {"model": self.name, "lm": self.lm.fingerprint(), "settings": settings}
