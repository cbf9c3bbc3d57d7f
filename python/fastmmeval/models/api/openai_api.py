"""`openai`: any OpenAI-compatible chat server (OpenAI, vLLM, SGLang, LiteLLM, `fastmmeval serve`).

Generate requests go to `POST {base_url}/chat/completions` with images as PNG data URLs.
Loglikelihood requests go to `POST {base_url}/loglikelihood`, an extension `fastmmeval serve`
offers (`{"model", "messages", "continuations"}` -> `{"logprobs", "is_greedy", "usage"}`); other
servers answer 404 and the run stops with an error saying so. The HTTP client is aiohttp.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fastmmeval.errors import ConfigError
from fastmmeval.models.api.args import ApiArgs
from fastmmeval.models.api.calls import CallError, Reply, error_detail, status_error
from fastmmeval.models.api.client import ApiModel
from fastmmeval.models.api.messages import openai_messages
from fastmmeval.models.base import MODELS
from fastmmeval.protocol import Request


@dataclass
class OpenAIArgs(ApiArgs):
    """`--model_args` of `openai`: those of every API backend (see `ApiArgs`) and

    base_url: the server's API root, ending in /v1.
    api_key_env: default OPENAI_API_KEY.
    json_mode: ask for a JSON object (`response_format={"type": "json_object"}`); a request with a
        `json_schema` asks for that schema instead (`{"type": "json_schema", ...}`).
    seed: sent as `seed` (unset: the task's seed).
    """

    api_key_env: str = "OPENAI_API_KEY"
    base_url: str = "https://api.openai.com/v1"
    json_mode: bool = False
    seed: int | None = None


@MODELS.register("openai")
class OpenAIChat(ApiModel):
    """Chat completions from an OpenAI-compatible server."""

    name = "openai"
    Args = OpenAIArgs
    args: OpenAIArgs

    def __init__(self, args: OpenAIArgs) -> None:
        try:
            import aiohttp  # noqa: F401
        except ImportError:
            raise ConfigError("--model openai needs aiohttp: pip install 'fastmmeval[api]'") from None
        super().__init__(args)
        self.base_url = args.base_url.rstrip("/")

    def payload(self, request: Request) -> dict[str, Any]:
        """The JSON body of the request's call, plus the `path` it is posted to."""
        a, settings = self.args, request.generation
        messages = openai_messages(request, a.system, a.max_image_side)
        if request.kind == "loglikelihood":
            return {"path": "/loglikelihood", "model": a.model, "messages": messages,
                    "continuations": list(request.continuations)}
        body: dict[str, Any] = {
            "path": "/chat/completions",
            "model": a.model,
            "messages": messages,
            "max_tokens": a.max_tokens or settings.max_new_tokens,
            "temperature": settings.temperature if a.temperature is None else a.temperature,
            "seed": settings.seed if a.seed is None else a.seed,
        }
        if settings.top_p < 1:
            body["top_p"] = settings.top_p
        if settings.stop:
            body["stop"] = list(settings.stop[:4])  # OpenAI takes at most 4
        if request.json_schema is not None:
            body["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "reply", "schema": json.loads(request.json_schema), "strict": False}}
        elif a.json_mode:
            body["response_format"] = {"type": "json_object"}
        return body

    def client(self) -> Any:
        """An aiohttp session carrying the key (timeouts are the caller's)."""
        import aiohttp

        return aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {self._key}"}, timeout=aiohttp.ClientTimeout(total=None)
        )

    async def send(self, client: Any, payload: dict[str, Any]) -> Reply:
        """POST the payload; a Reply from its JSON, or CallError for an error status, a broken
        connection, or a body that is not the expected JSON."""
        import aiohttp

        path = payload["path"]
        body = {k: v for k, v in payload.items() if k != "path"}
        try:
            async with client.post(self.base_url + path, json=body) as resp:
                raw = await resp.read()
                status, retry_after = resp.status, resp.headers.get("Retry-After")
        except aiohttp.ClientError as e:
            raise CallError("connection", f"POST {path}: connection failed ({type(e).__name__})", retry=True) from None
        if status != 200:
            detail = error_detail(raw)
            if status in (404, 405) and path == "/loglikelihood":
                detail = f"{self.base_url} offers no POST /loglikelihood (`fastmmeval serve` does): {detail}"
            raise status_error(status, retry_after, detail, f"POST {path}", self.args.api_key_env)
        try:
            data = json.loads(raw)
            usage = {k: int(v) for k, v in (data.get("usage") or {}).items() if k.endswith("_tokens")}
            if path == "/loglikelihood":
                logprobs, is_greedy = [float(x) for x in data["logprobs"]], [bool(x) for x in data["is_greedy"]]
                if not len(logprobs) == len(is_greedy) == len(payload["continuations"]):
                    raise ValueError("one score per continuation expected")
                return Reply(logprobs=logprobs, is_greedy=is_greedy, usage=usage)
            content = data["choices"][0]["message"]["content"]
            return Reply(text=content if isinstance(content, str) else "", usage=usage)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
            raise CallError("malformed", f"POST {path}: malformed reply ({type(e).__name__})", retry=True) from None

    def fingerprint(self) -> dict[str, Any]:
        """The shared settings, the server and the OpenAI-only ones."""
        return {**super().fingerprint(), "base_url": self.base_url, "json_mode": self.args.json_mode,
                "seed": self.args.seed}
