"""A scripted OpenAI-compatible server that plays every role of the live pipeline.

It tells which prompt a call is (extract_text, ..., score) from the call's system turn, which is
that prompt's system text, and answers with a valid reply for it made from the call's own text
(so different pages get different questions), unless the test gave that stage its own answer: a
fixed text, or a function of the user turn's text returning a text or a whole HTTP response (an
error status, say). Calls are counted per stage at the server.

    with LiveLLM({"finalize": BAD_TOTALS}) as llm:
        role = Role(RoleSpec("finalizer", "openai", llm.role_args()), ...)
        ...
        assert llm.counts() == {"finalize": 1}
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web
from api_fixtures import FakeAPI

from fastmmeval.live.prompts import PROMPT_NAMES, prompt
from fastmmeval.live.records import SUBTASKS

KEY_ENV = "FMM_LIVE_TEST_KEY"  # the tests set it; the server never checks the key

# A stage's answer: the reply text, or a function of the user turn's text giving the text or a response.
Answer = str | Callable[[str], "str | web.Response"]

_WORDS = (
    "harbour", "election", "rainfall", "satellite", "museum", "vaccine", "railway", "festival", "glacier",
    "startup", "tariff", "orchestra", "wildfire", "telescope", "bakery", "marathon", "drought", "reactor",
    "library", "volcano", "currency", "stadium", "archive", "pipeline", "lighthouse", "vineyard", "tunnel",
    "airline", "robotics", "coral", "bridge", "ferry", "rainforest", "algorithm", "pension", "cathedral",
    "earthquake", "copper", "semiconductor", "harvest", "parliament", "spacecraft", "theatre", "monsoon",
    "hospital", "battery", "canal", "fossil", "opera", "refinery", "subway", "tornado", "university",
    "wetland", "bicycle", "dockyard", "exhibition", "forecast", "greenhouse", "heatwave", "icebreaker",
    "jazz", "kiln", "lagoon",
)
_STEMS = {
    "Concrete Recognition": "What does the page report about the",
    "Analytical Questions": "What led to the events around the",
    "Divergent Thinking": "Write a new headline from a different angle for the story on the",
    "Real-world Assistance": "Turn the figures about the following into a markdown table:",
}


_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def phrase(seed: str, n: int = 6) -> str:
    """`n` words picked by the hash of `seed` less any UTC time in it: the same seed, the same words,
    whenever the page was captured."""
    digest = hashlib.sha256(_TIME.sub("", seed).encode("utf-8")).digest()
    return " ".join(_WORDS[b % len(_WORDS)] for b in digest[:n])


def _block(text: str, tag: str) -> str:
    found = re.search(rf"<{tag}>\n?(.*?)\n?</{tag}>", text, re.DOTALL)
    return found.group(1).strip() if found else ""


def _criteria(*points: int) -> list[dict[str, Any]]:
    return [{"points": p, "criterion": f"Names point {i + 1} of the reference answer correctly."}
            for i, p in enumerate(points)]


def default_reply(stage: str, text: str) -> str:
    """A valid reply to prompt `stage` whose user turn is `text`."""
    words = phrase(text)
    if stage == "extract_text":
        return json.dumps({"text": _block(text, "html_text") or words})
    if stage == "extract_images":
        return json.dumps({"images": [{"where": "top", "shows": f"a photograph of the {words}",
                                       "relates_to": "the lead story"}], "page": f"A page about the {words}."})
    if stage == "extract_news":
        return json.dumps({"stories": [{"story": words, "new": f"The {words} opened today.",
                                        "implications": "Visitors will have to plan ahead."}]})
    if stage == "generate":
        return json.dumps({s: [{"question": f"{_STEMS[s]} {phrase(text + s, 8)}?",
                                "answer": f"The page says the {phrase(text + s, 8)} changed.",
                                "criteria": _criteria(6, 4)}] for s in SUBTASKS})
    if stage in ("check", "finalize"):
        draft = json.loads(_block(text, "draft" if stage == "check" else "item"))
        points = (5, 5) if stage == "check" else (4, 3, 3)
        return json.dumps({"question": draft["question"], "answer": draft["answer"], "criteria": _criteria(*points)})
    if stage == "score":
        h = hashlib.sha256(text.encode("utf-8")).digest()[0]
        return json.dumps({"authenticity": 3 + h % 3, "coherence": 2 + h % 2, "clarity": 2,
                           "reason": "The answer is on the page and follows from the question."})
    raise ValueError(f"no live prompt named {stage!r}")


def chat_reply(text: str) -> web.Response:
    """An OpenAI chat completion answering `text`."""
    return web.json_response({
        "id": "live", "object": "chat.completion", "model": "scripted",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    })


def _content_text(content: str | list[dict[str, Any]]) -> str:
    return content if isinstance(content, str) else "".join(p["text"] for p in content if p["type"] == "text")


def stage_of(body: dict[str, Any]) -> str:
    """Which live prompt a chat request is: the one whose system text is a system turn of it."""
    systems = {_content_text(m["content"]) for m in body["messages"] if m["role"] == "system"}
    for name in PROMPT_NAMES:
        if prompt(name).system in systems:
            return name
    raise ValueError("not a live pipeline prompt")


def user_text(body: dict[str, Any]) -> str:
    """The text of a chat request's last user turn."""
    return _content_text([m for m in body["messages"] if m["role"] == "user"][-1]["content"])


def image_count(body: dict[str, Any]) -> int:
    """How many images a chat request carries."""
    return sum(isinstance(m["content"], list) and sum(p["type"] == "image_url" for p in m["content"])
               for m in body["messages"])


class LiveLLM:
    """The scripted server (see the module docstring); `answers` override stages' replies."""

    def __init__(self, answers: Mapping[str, Answer] | None = None, delay_s: float = 0.0) -> None:
        self.answers = dict(answers or {})
        unknown = set(self.answers) - set(PROMPT_NAMES)
        if unknown:
            raise ValueError(f"no live prompts named {sorted(unknown)}")
        self.server = FakeAPI(self._script, delay_s)
        self.url = self.server.url

    def _script(self, _: int, body: dict[str, Any]) -> web.Response:
        stage, text = stage_of(body), user_text(body)
        answer = self.answers.get(stage)
        reply = default_reply(stage, text) if answer is None else answer if isinstance(answer, str) else answer(text)
        return reply if isinstance(reply, web.Response) else chat_reply(reply)

    def counts(self) -> Counter[str]:
        """Calls received so far, per stage."""
        return Counter(stage_of(body) for _, body, _ in self.server.calls)

    def bodies(self, stage: str) -> list[dict[str, Any]]:
        """The request bodies received for `stage`, in order of arrival."""
        return [body for _, body, _ in self.server.calls if stage_of(body) == stage]

    def role_args(self, url: str | None = None, **overrides: str) -> dict[str, str]:
        """`--model_args` of an `openai` role talking to this server (or to `url`, a proxy in front
        of it): no response cache (the stage cache is the one under test), no retries, short backoff."""
        args = {"base_url": url or self.url, "model": "scripted", "api_key_env": KEY_ENV, "cache_dir": "off",
                "max_retries": "0", "backoff": "0.01", "timeout": "10"}
        return args | overrides

    def __enter__(self) -> LiveLLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()
