"""A scripted OpenAI-compatible server that plays every role of the evolve pipeline.

It tells which prompt a call is from the call's system turn (that prompt's system text) and answers
with a valid reply made from the call's own text, unless the test gave that prompt its own answer (a
fixed text, or a function of the user turn's text returning a text or a whole HTTP response). On the
drawn scenes of tests/evolve_images.py (whose manifest context says what they hold) the generator
writes a counting question with the true count as its answer and a plan that counts with the
`count` tool, and the verifier answers the option equal to the count the tools report: so true
instances verify, and an instance whose answer the test made wrong does not. Calls are counted per
prompt at the server.

    with EvolveLLM({"judge": reject_all}) as llm:
        roles = llm.roles()
        ...
        assert llm.counts()["judge"] == 10
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from aiohttp import web
from api_fixtures import FakeAPI
from live_llm import Answer, chat_reply, user_text

from fastmmeval.evolve.ask import evolve_prompt
from fastmmeval.evolve.pipeline import PROMPTS, ROLES
from fastmmeval.evolve.replies import PERSPECTIVES
from fastmmeval.live.prompts import Prompt
from fastmmeval.live.roles import RoleSpec

KEY_ENV = "FMM_EVOLVE_TEST_KEY"  # the tests set it; the server never checks the key
_COUNTS = re.compile(r"above ((?:\d+ \w+(?:, )?)+) shapes")


def _field(pattern: str, text: str, default: str = "") -> str:
    found = re.search(pattern, text)
    return found.group(1) if found else default


def truth(text: str) -> dict[str, int]:
    """The shape counts per colour a drawn scene's context states ("... above 2 blue, 1 red shapes.")."""
    found = _COUNTS.search(text)
    if not found:
        return {}
    return {colour: int(n) for n, colour in (part.split() for part in found.group(1).split(", "))}


def count_question(text: str) -> dict[str, Any]:
    """The generator's instance for a scene: how many shapes of its first colour, the options the true
    count and its neighbours (as many as the prompt asks), the answer the true count's letter."""
    n = int(_field(r"exactly (\d+) options", text, "4"))
    counts = truth(text) or {"red": 0}
    colour, right = sorted(counts.items())[0]
    options = [str(right + d) for d in range(n)]  # right first, then rotated by the scene's colours
    shift = len(counts) % n
    options = options[shift:] + options[:shift]
    return {"question": f"How many {colour} shapes are in the picture?", "hint": "",
            "options": options, "answer": "ABCDE"[options.index(str(right))],
            "plan": [{"tool": "count", "inputs": [{"name": "colour", "value": colour}],
                      "purpose": f"count the {colour} shapes"}]}


def verifier_answer(text: str) -> str:
    """The option equal to the number the last tool output starts with (else the first option)."""
    options = re.findall(r"^([A-E])\. (.+)$", text, re.MULTILINE)
    outputs = re.findall(r"^\d+\. \w+ \(.*?\): (\d+)", text, re.MULTILINE)
    for letter, option in options:
        if outputs and option.strip() == outputs[-1]:
            return letter
    return options[0][0] if options else "A"


def default_reply(name: str, text: str) -> str:
    """A valid reply to prompt `name` whose user turn is `text`."""
    atomic = _field(r'atomic task "([^"]+)"', text, "task")
    if name == "spec_benchmark":
        return json.dumps({"purpose": "Tests perception and reasoning over single images.",
                           "format": "One image, an optional hint, a question and two to four lettered options."})
    if name == "spec_atomic":
        return json.dumps({"purpose": f"Tests {atomic.replace('_', ' ')} on one image.",
                           "data_sources": "Everyday photographs and drawings; each question asks about one image."})
    if name == "pattern_extract":
        perspective = _field(r"perspective only: ([^(]+?) \(", text, "visual content")
        return json.dumps({"patterns": [{"pattern": f"flat coloured shapes ({perspective})", "role": "central"},
                                        {"pattern": "a printed word at the top", "role": "peripheral"}]})
    if name == "pattern_consolidate":
        lines = re.findall(r"^- \[(central|peripheral)\] ([^:]+): (.+)$", text, re.MULTILINE)
        merged = {(p, t): r for r, p, t in lines}
        return json.dumps({"patterns": [{"perspective": p, "pattern": t, "role": r}
                                        for (p, t), r in list(merged.items())[:12] if p in PERSPECTIVES]})
    if name == "acquisition_plan":
        source = _field(r"The image sources available: ([\w-]+)", text, "folder")
        return json.dumps({"fields": ["title", "context"], "strategy": {"source": source, "why": "it has images"},
                           "queries": [f"{atomic} shapes"]})
    if name == "judge":
        accept = "shapes" in _field(r"(?s)The image's text:\n(.+?)\n\n", text + "\n\n")
        return json.dumps({"accept": accept, "rationales": ["coloured shapes are visible" if accept
                                                            else "no shapes are visible"]})
    if name == "update_query":
        return json.dumps({"query": _field(r'The query "([^"]+)"', text) + " shapes"})
    if name == "generate":
        return json.dumps(count_question(text))
    if name == "compare":
        return json.dumps({"best": 0, "reason": "It asks about the image."})
    if name == "verify":
        return json.dumps({"answer": verifier_answer(text), "reason": "The count says so."})
    raise ValueError(f"no evolve prompt named {name!r}")


def _content_text(content: str | list[dict[str, Any]]) -> str:
    return content if isinstance(content, str) else "".join(p["text"] for p in content if p["type"] == "text")


_SYSTEMS: dict[str, str] = {}


def prompt_of(body: dict[str, Any]) -> str:
    """Which evolve prompt a chat request is: the one whose system text is a system turn of it."""
    if not _SYSTEMS:
        prompts: dict[str, Prompt] = {n: evolve_prompt(n) for n in PROMPTS}
        _SYSTEMS.update({p.system: n for n, p in prompts.items()})
    for m in body["messages"]:
        if m["role"] == "system" and _content_text(m["content"]) in _SYSTEMS:
            return _SYSTEMS[_content_text(m["content"])]
    raise ValueError("not an evolve prompt")


class EvolveLLM:
    """The scripted server (see the module docstring); `answers` override prompts' replies."""

    def __init__(self, answers: Mapping[str, Answer] | None = None, delay_s: float = 0.0) -> None:
        self.answers = dict(answers or {})
        unknown = set(self.answers) - set(PROMPTS)
        if unknown:
            raise ValueError(f"no evolve prompts named {sorted(unknown)}")
        self.server = FakeAPI(self._script, delay_s)
        self.url = self.server.url

    def _script(self, _: int, body: dict[str, Any]) -> web.Response:
        name, text = prompt_of(body), user_text(body)
        answer = self.answers.get(name)
        reply = default_reply(name, text) if answer is None else answer if isinstance(answer, str) else answer(text)
        return reply if isinstance(reply, web.Response) else chat_reply(reply)

    def counts(self) -> Counter[str]:
        """Calls received so far, per prompt."""
        return Counter(prompt_of(body) for _, body, _ in self.server.calls)

    def texts(self, name: str) -> list[str]:
        """The user turns received for prompt `name`, in order of arrival."""
        return [user_text(body) for _, body, _ in self.server.calls if prompt_of(body) == name]

    def bodies(self, name: str) -> list[dict[str, Any]]:
        """The request bodies received for prompt `name`, in order of arrival."""
        return [body for _, body, _ in self.server.calls if prompt_of(body) == name]

    def role_args(self, url: str | None = None, **overrides: str) -> dict[str, str]:
        """`--model_args` of an `openai` role talking to this server (or to `url`, a proxy in front of
        it): no response cache (the stage cache is the one under test), no retries, short backoff."""
        args = {"base_url": url or self.url, "model": "scripted", "api_key_env": KEY_ENV, "cache_dir": "off",
                "max_retries": "0", "backoff": "0.01", "timeout": "10"}
        return args | overrides

    def role_specs(self, generators: int = 1, url: str | None = None) -> tuple[tuple[RoleSpec, ...],
                                                                               tuple[RoleSpec, ...]]:
        """RoleSpecs of every role (and `generators` generators) played by this server."""
        roles = tuple(RoleSpec(r, "openai", self.role_args(url)) for r in ROLES)
        gens = tuple(RoleSpec(f"generator{i + 1}", "openai", self.role_args(url, model=f"scripted-{i + 1}"))
                     for i in range(generators))
        return roles, gens

    def __enter__(self) -> EvolveLLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()
