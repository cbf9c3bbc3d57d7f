"""`anthropic`: Claude models through the official `anthropic` SDK's Messages API.

Images travel as base64 PNG `image` blocks, system turns as the `system` parameter. The SDK's own
retries are off: retries, backoff and the concurrency limit are `ApiModel`'s, as for `openai`.
The Messages API gives no log-probabilities, so loglikelihood tasks are refused. Temperature is
sent when the installed SDK has that parameter; anthropic 2.x does not, and then only an explicit
`temperature=` model arg is sent (as an extra body field), else the API's default applies.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from fastmmeval.errors import ConfigError
from fastmmeval.models.api.args import ApiArgs
from fastmmeval.models.api.calls import CallError, Reply, status_error
from fastmmeval.models.api.client import ApiModel
from fastmmeval.models.api.messages import openai_messages
from fastmmeval.models.base import MODELS
from fastmmeval.protocol import Request

MISSING_SDK = "--model anthropic needs the anthropic SDK: pip install 'fastmmeval[api]'"


@dataclass
class AnthropicArgs(ApiArgs):
    """`--model_args` of `anthropic`: those of every API backend (see `ApiArgs`) and

    api_key_env: default ANTHROPIC_API_KEY.
    base_url: the API root ("": the SDK's default, https://api.anthropic.com).
    """

    api_key_env: str = "ANTHROPIC_API_KEY"
    base_url: str = ""


def anthropic_content(content: str | list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """An OpenAI message content as Anthropic content: text as is, `image_url` data URLs as
    base64 `image` blocks."""
    if isinstance(content, str):
        return content
    blocks: list[dict[str, Any]] = []
    for part in content:
        if part["type"] == "text":
            blocks.append({"type": "text", "text": part["text"]})
        else:
            header, data = part["image_url"]["url"].split(",", 1)
            media_type = header.removeprefix("data:").removesuffix(";base64")
            blocks.append({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}})
    return blocks


def _text(content: str | list[dict[str, Any]]) -> str:
    return content if isinstance(content, str) else "".join(p["text"] for p in content if p["type"] == "text")


@MODELS.register("anthropic")
class AnthropicMessages(ApiModel):
    """Messages from Anthropic's API (or anything speaking it)."""

    name = "anthropic"
    Args = AnthropicArgs
    args: AnthropicArgs

    def __init__(self, args: AnthropicArgs) -> None:
        try:
            import anthropic  # noqa: F401
        except ImportError:
            raise ConfigError(MISSING_SDK) from None
        super().__init__(args)
        # anthropic 2.x dropped `temperature` from `messages.create`; it is then sent only when asked for.
        create = anthropic.resources.AsyncMessages.create
        self.sdk_has_temperature = "temperature" in inspect.signature(create).parameters

    def payload(self, request: Request) -> dict[str, Any]:
        """The keyword arguments of `messages.create` for the request."""
        if request.kind != "generate":
            raise ConfigError("model 'anthropic': the Messages API gives no log-probabilities; "
                              "use a generate task (or --model openai against `fastmmeval serve`)")
        a, settings = self.args, request.generation
        chat = openai_messages(request, a.system, a.max_image_side)
        system = "\n\n".join(_text(m["content"]) for m in chat if m["role"] == "system")
        kwargs: dict[str, Any] = {
            "model": a.model,
            "max_tokens": a.max_tokens or settings.max_new_tokens,
            "messages": [{"role": m["role"], "content": anthropic_content(m["content"])}
                         for m in chat if m["role"] != "system"],
        }
        if system:
            kwargs["system"] = system
        if self.sdk_has_temperature:
            kwargs["temperature"] = settings.temperature if a.temperature is None else a.temperature
        elif a.temperature is not None:
            kwargs["extra_body"] = {"temperature": a.temperature}
        stops = [s for s in settings.stop if s.strip()]  # the API refuses whitespace-only stop sequences
        if stops:
            kwargs["stop_sequences"] = stops
        return kwargs

    def client(self) -> Any:
        """An async SDK client with its retries off."""
        import anthropic

        return anthropic.AsyncAnthropic(api_key=self._key, base_url=self.args.base_url or None, max_retries=0,
                                        timeout=self.args.timeout)

    async def send(self, client: Any, payload: dict[str, Any]) -> Reply:
        """One `messages.create` call; SDK errors become CallErrors."""
        import anthropic

        try:
            message = await client.messages.create(**payload)
            text = "".join(block.text for block in message.content if block.type == "text")
            usage = {"prompt_tokens": int(message.usage.input_tokens),
                     "completion_tokens": int(message.usage.output_tokens)}
        except anthropic.APIStatusError as e:
            detail = getattr(e, "message", "") or str(e)
            raise status_error(e.status_code, e.response.headers.get("retry-after"), detail, "messages.create",
                               self.args.api_key_env) from None
        except anthropic.APIConnectionError as e:
            kind = "timeout" if isinstance(e, anthropic.APITimeoutError) else "connection"
            raise CallError(kind, f"messages.create: {kind} ({type(e).__name__})", retry=True) from None
        except (anthropic.APIError, ValueError, AttributeError, TypeError) as e:
            raise CallError("malformed", f"messages.create: malformed reply ({type(e).__name__})", retry=True) from None
        return Reply(text=text, usage=usage)

    def fingerprint(self) -> dict[str, Any]:
        """The shared settings and the API root."""
        return {**super().fingerprint(), "base_url": self.args.base_url}
