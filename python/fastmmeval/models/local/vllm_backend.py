"""`vllm`: any chat model vLLM serves, run through vLLM's offline `LLM` API (a CUDA machine).

Requests become OpenAI-style conversations for `LLM.chat`, which renders the model's chat template
and hands the images to the model as `multi_modal_data`. Each image travels as a lossless PNG data
URL in an `image_url` content part, the form `LLM.chat` documents for every vLLM version that has
multimodal chat ("Multimodal Inputs" in vLLM's docs, docs/features/multimodal_inputs.md; the
docstring of `vllm.entrypoints.llm.LLM.chat`).

Log-likelihoods come from prompt log-probabilities: the chat is rendered once up to the assistant
turn's opening and once with the continuation as the start of the assistant message
(`continue_final_message`); the continuation's tokens are those past the first rendering.

vLLM is imported only when this backend is built; none of this module's translation needs it.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fastmmeval.errors import ConfigError
from fastmmeval.models.base import MODELS, Model, each_or_alone, failure_reason
from fastmmeval.models.chat_messages import to_vllm_chat
from fastmmeval.protocol import GenerationSettings, Request, Response

MISSING_VLLM = "--model vllm needs vLLM: pip install vllm (a CUDA machine)"
# A request's scores: log-probability and greediness per continuation, and token usage.
_Score = tuple[list[float], list[bool], dict[str, int]]


@dataclass
class VLLMArgs:
    """`--model_args` of `vllm`.

    pretrained: the model, a hub id or a local folder (required).
    dtype: auto, float16, bfloat16 or float32 (vLLM's `dtype`).
    max_model_len: the context length (0: the model's own).
    gpu_memory_utilization: the share of GPU memory vLLM may take.
    tensor_parallel_size: GPUs the model is split across.
    max_images: the most images one request may carry (vLLM's `limit_mm_per_prompt`; 0 for a
        text-only model, which then gets no such limit passed).
    seed: vLLM's engine seed.
    trust_remote_code: let the model's repository run its own code.
    chat_template: a Jinja chat template file (or the template text) to use instead of the
        model's own ("": the model's own).
    """

    pretrained: str = ""
    dtype: str = "auto"
    max_model_len: int = 0
    gpu_memory_utilization: float = 0.9
    tensor_parallel_size: int = 1
    max_images: int = 4
    seed: int = 0
    trust_remote_code: bool = False
    chat_template: str = ""


def to_sampling_kwargs(settings: GenerationSettings) -> dict[str, Any]:
    """Keyword arguments of `vllm.SamplingParams` for `settings`: greedy at temperature 0,
    `max_tokens`, `stop` strings (left out of the text) and, when sampling, the seed."""
    kwargs: dict[str, Any] = {
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        "max_tokens": settings.max_new_tokens,
        "stop": list(settings.stop),
    }
    if settings.temperature > 0:
        kwargs["seed"] = settings.seed
    return kwargs


def llm_kwargs(args: VLLMArgs) -> dict[str, Any]:
    """Keyword arguments of `vllm.LLM` for `args` (defaults left to vLLM where 0 means so)."""
    kwargs: dict[str, Any] = {
        "model": args.pretrained,
        "dtype": args.dtype,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "tensor_parallel_size": args.tensor_parallel_size,
        "seed": args.seed,
        "trust_remote_code": args.trust_remote_code,
    }
    if args.max_model_len > 0:
        kwargs["max_model_len"] = args.max_model_len
    if args.max_images > 0:
        kwargs["limit_mm_per_prompt"] = {"image": args.max_images}
    return kwargs


def load_chat_template(value: str) -> str | None:
    """The chat template `value` names: a file's text, `value` itself, or None for ""."""
    if not value:
        return None
    path = Path(value)
    if path.is_file():
        return path.read_text(encoding="utf-8")
    if "{" not in value:
        raise ConfigError(f"--model_args for model 'vllm': chat_template {value!r} is neither a file nor a template")
    return value


def import_vllm() -> Any:
    """The `vllm` module, or a ConfigError saying how to get it."""
    try:
        import vllm
    except ModuleNotFoundError as e:  # also when sys.modules["vllm"] is None
        if e.name == "vllm":
            raise ConfigError(MISSING_VLLM) from None
        raise ConfigError(f"vLLM is installed but failed to import: {e}") from None
    except ImportError as e:  # a broken install
        raise ConfigError(f"vLLM is installed but failed to import: {e}") from None
    return vllm


@MODELS.register("vllm")
class VLLM(Model):
    """A chat model run by vLLM's offline LLM API (CUDA; not exercised in CI)."""

    name = "vllm"
    Args = VLLMArgs

    def __init__(self, args: VLLMArgs) -> None:
        if not args.pretrained:
            raise ConfigError("--model_args for model 'vllm': pretrained=<hub id or folder> is required")
        if args.max_images < 0:
            raise ConfigError(f"--model_args for model 'vllm': max_images must be >= 0, got {args.max_images}")
        self.args = args
        self.chat_template = load_chat_template(args.chat_template)
        self._vllm = import_vllm()
        self.llm = self._vllm.LLM(**llm_kwargs(args))

    # -- generate -----------------------------------------------------------------------------

    def generate(self, requests: list[Request]) -> list[Response]:
        """One Response with the model's reply (or the reason it failed) per request, in order;
        all requests go to vLLM in one call (one by one only after that call fails)."""
        responses = [Response(request_id=r.id) for r in requests]
        ready: list[tuple[int, list[dict[str, Any]], Any]] = []
        for i, request in enumerate(requests):
            if request.generation.max_new_tokens <= 0:
                responses[i].text = ""
                continue
            try:
                chat = self._chat_of(request)
                params = self._vllm.SamplingParams(**to_sampling_kwargs(request.generation))
            except Exception as e:  # belongs to this request only
                responses[i].error = failure_reason("preparing the request failed", e)
                continue
            ready.append((i, chat, params))
        if not ready:
            return responses
        outputs = each_or_alone(lambda part: self._chat([c for _, c, _ in part], [p for _, _, p in part]), ready)
        for (i, _, _), output in zip(ready, outputs, strict=True):
            if isinstance(output, Exception):
                responses[i].error = failure_reason("generation failed", output)
                continue
            completion = output.outputs[0]
            responses[i].text = completion.text
            responses[i].usage = _usage(output, completion)
        return responses

    def _chat(self, chats: list[list[dict[str, Any]]], params: Any, **kwargs: Any) -> list[Any]:
        outputs = list(self.llm.chat(chats, params, use_tqdm=False, chat_template=self.chat_template, **kwargs))
        if len(outputs) != len(chats):
            raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(chats)} conversations")
        return outputs

    def _chat_of(self, request: Request) -> list[dict[str, Any]]:
        """The request as a conversation, refused when it has more images than vLLM accepts."""
        count = len(request.images)
        if count > self.args.max_images:
            raise ValueError(f"{count} images but max_images={self.args.max_images} (raise it in --model_args)")
        return to_vllm_chat(request)

    # -- loglikelihood ------------------------------------------------------------------------

    def loglikelihood(self, requests: list[Request]) -> list[Response]:
        """One Response with per-continuation log-probabilities and greediness (or the reason it
        failed) per request, in order."""
        responses = [Response(request_id=r.id) for r in requests]
        ready: list[tuple[int, list[dict[str, Any]]]] = []
        for i, request in enumerate(requests):
            try:
                ready.append((i, self._chat_of(request)))
            except Exception as e:
                responses[i].error = failure_reason("preparing the request failed", e)
        if not ready:
            return responses
        scores = each_or_alone(lambda part: self._score([(requests[i], chat) for i, chat in part]), ready)
        for (i, _), score in zip(ready, scores, strict=True):
            if isinstance(score, Exception):
                responses[i].error = failure_reason("scoring failed", score)
            else:
                responses[i].logprobs, responses[i].is_greedy, responses[i].usage = score
        return responses

    def _score(self, items: list[tuple[Request, list[dict[str, Any]]]]) -> list[_Score | Exception]:
        """Scores of each request's continuations; raises only when a vLLM call fails."""
        params = self._vllm.SamplingParams
        contexts = self._chat([chat for _, chat in items], params(temperature=0.0, max_tokens=1))
        pairs = [(k, j) for k, (request, _) in enumerate(items) for j, c in enumerate(request.continuations) if c]
        full = self._chat(
            [items[k][1] + [{"role": "assistant", "content": items[k][0].continuations[j]}] for k, j in pairs],
            params(temperature=0.0, max_tokens=1, prompt_logprobs=1),
            add_generation_prompt=False, continue_final_message=True,
        ) if pairs else []
        scored = dict(zip(pairs, full, strict=True))
        out: list[_Score | Exception] = []
        for k, (request, _) in enumerate(items):
            context = list(contexts[k].prompt_token_ids)
            logprobs, greedy = [0.0] * len(request.continuations), [True] * len(request.continuations)
            try:
                for j in range(len(request.continuations)):
                    if (k, j) in scored:
                        logprobs[j], greedy[j] = continuation_score(context, scored[k, j])
            except ValueError as e:
                out.append(e)
                continue
            out.append((logprobs, greedy, {"prompt_tokens": len(context)}))
        return out

    def fingerprint(self) -> dict[str, Any]:
        """The model, dtype, vLLM version, chat template and every setting."""
        template = self.chat_template
        if template is None:
            try:
                template = self.llm.get_tokenizer().chat_template
            except Exception:
                template = None
        return {
            "model": self.name,
            "pretrained": self.args.pretrained,
            "dtype": self.args.dtype,
            "vllm_version": str(getattr(self._vllm, "__version__", "unknown")),
            "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest() if template else None,
            "settings": asdict(self.args),
        }


def continuation_score(context_ids: list[int], output: Any) -> tuple[float, bool]:
    """(sum of the log-probabilities of the tokens past `context_ids`, whether each of them is
    the most likely token) from a vLLM RequestOutput made with `prompt_logprobs`; ValueError when
    the prompt does not start with `context_ids` or adds nothing to it."""
    ids = list(output.prompt_token_ids)
    n = len(context_ids)
    if ids[:n] != context_ids or len(ids) <= n:
        raise ValueError("the chat template rendered the context differently once the continuation was "
                         "added, so the continuation's tokens cannot be told apart")
    total, greedy = 0.0, True
    for position in range(n, len(ids)):
        entry = output.prompt_logprobs[position] if output.prompt_logprobs is not None else None
        if not entry or ids[position] not in entry:
            raise ValueError(f"vLLM returned no prompt log-probability for prompt token {position}")
        chosen = entry[ids[position]]
        total += float(chosen.logprob)
        rank = getattr(chosen, "rank", None)
        if rank is not None:
            greedy = greedy and rank == 1
        else:
            greedy = greedy and chosen.logprob >= max(lp.logprob for lp in entry.values())
    return total, greedy


def _usage(output: Any, completion: Any) -> dict[str, int]:
    usage = {}
    if getattr(output, "prompt_token_ids", None) is not None:
        usage["prompt_tokens"] = len(output.prompt_token_ids)
    if getattr(completion, "token_ids", None) is not None:
        usage["completion_tokens"] = len(completion.token_ids)
    return usage
