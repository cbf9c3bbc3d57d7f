"""Scripted backends for the judge tests: a student that answers from a table and a judge that
grades by string comparison, both deterministic, counting their calls and failing on demand."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from fastmmeval.models import MODELS, Model
from fastmmeval.protocol import ImagePart, Message, Request, Response, TextPart

CALLS: Counter[str] = Counter()  # "<model>:<name>" -> requests answered
TIMELINE: list[tuple[str, str, float, float]] = []  # (model, name, start, end) of each generate call
_LOCK = threading.Lock()
_RATE = re.compile(r'\(rate ("?)(-?\d+(?:\.\d+)?)\1\)')  # LiveBench's scripted judge: "(rate 12)", '(rate "7")'
_SECTION = re.compile(r"\[([^\]]+)\]\n(.*?)(?=\n\n\[|\n\nReply)", re.DOTALL)


def reset() -> None:
    """Forget the calls counted so far."""
    CALLS.clear()
    TIMELINE.clear()


class _Scripted(Model):
    def __init__(self, args: Any) -> None:
        self.args = args

    def generate(self, requests: list[Request]) -> list[Response]:
        start = time.monotonic()
        time.sleep(self.args.delay_s)
        out = [self.answer(r) for r in requests]
        with _LOCK:
            CALLS[f"{self.name}:{self.args.name}"] += len(requests)
            TIMELINE.append((self.name, self.args.name, start, time.monotonic()))
        return out

    def answer(self, request: Request) -> Response:
        raise NotImplementedError

    def loglikelihood(self, requests: list[Request]) -> list[Response]:
        """The option the scripted reply names (its JSON's Rating, else the reply itself) scores 0, the others
        -10: how a structured reply's choices (`fastmmeval serve` with a JSON schema) come out of a script."""
        out = []
        for r in requests:
            said = self.answer(Request(r.id, "generate", r.messages, r.generation)).text or ""
            rated = re.search(r'"Rating":\s*"?(-?\d+)', said)
            picked = rated.group(1) if rated else said.strip()
            scores = [0.0 if c.strip() == picked else -10.0 for c in r.continuations]
            out.append(Response(r.id, logprobs=scores, is_greedy=[s == 0.0 for s in scores]))
        return out

    def fingerprint(self) -> dict[str, Any]:
        return {"scripted": self.name, "args": vars(self.args)}


@dataclass
class StudentArgs:
    answers: str = ""  # a JSON file: request id ("task/doc_id") -> answer text
    default: str = "I don't know"
    delay_s: float = 0.0
    name: str = "student"


class ScriptedStudent(_Scripted):
    """Answers each request with the text the test scripted for its id."""

    name = "scripted_student"
    Args = StudentArgs

    def __init__(self, args: Any) -> None:
        super().__init__(args)
        self.table = json.loads(Path(args.answers).read_text()) if args.answers else {}

    def answer(self, request: Request) -> Response:
        return Response(request.id, text=self.table.get(request.id, self.args.default))


@dataclass
class JudgeArgs:
    name: str = "judge"
    damage: str = "none"  # none | fenced | prose | strings: how the JSON reply is wrapped
    fail_on: str = ""  # an answer containing this gets a backend error
    garbage_on: str = ""  # an answer containing this gets an unreadable reply
    harsh: bool = False  # a second opinion: half marks for correct answers
    delay_s: float = 0.0


class ScriptedJudge(_Scripted):
    """Grades by comparing the answer with the reference (or the option texts), replying in the
    JSON each prompt asks for, damaged the way `damage` says."""

    name = "scripted_judge"
    Args = JudgeArgs

    def answer(self, request: Request) -> Response:
        prompt = request.messages[-1].text
        if "Just complete the last space of the correctness score." in prompt:  # MM-Vet's table prompt
            _, truth, pred = prompt.rsplit("\n", 1)[-1].removesuffix(" |").split(" | ")
            if self.args.fail_on and self.args.fail_on in pred:
                return Response(request.id, error="HTTP 500: scripted judge failure")
            if self.args.garbage_on and self.args.garbage_on in pred:
                return Response(request.id, text="I would rather not grade this one.")
            tight = [t.replace(" <AND> ", "<AND>").replace(" <OR> ", "<OR>").strip() for t in (truth, pred)]
            right = tight[0] == tight[1]
            return Response(request.id, text=f"{(0.5 if self.args.harsh else 1.0) if right else 0.0} (scripted)")
        if prompt.endswith("\n\nExtracted answer: "):  # MathVista's extraction prompt: the last list, number or letter
            response = prompt.removesuffix("\n\nExtracted answer: ").rsplit("\n\n", 1)[1]
            if self.args.fail_on and self.args.fail_on in response:
                return Response(request.id, error="HTTP 500: scripted judge failure")
            found = re.findall(r"\[[^\]]*\]", response) or re.findall(r"-?\d+(?:\.\d+)?", response)
            found = found or re.findall(r"\b[A-Z]\b", response)
            return Response(request.id, text=found[-1] if found else "")
        if prompt.startswith("Imagine you are an intelligent teacher."):  # HallusionBench's correctness prompt
            reference = prompt.split("\nReference answer: ", 1)[1].split("\nPrediction answer:", 1)[0]
            answer = prompt.split("\nPrediction answer:", 1)[1].removesuffix("\nOutput:")
            if self.args.fail_on and self.args.fail_on in answer:
                return Response(request.id, error="HTTP 500: scripted judge failure")
            said = re.findall(r"\b(yes|no)\b", answer.lower())
            truth = "yes" if re.search(r"\b(yes|true)\b", reference.lower()) else "no"
            return Response(request.id, text="unclear" if not said else "correct" if said[0] == truth else "incorrect")
        if prompt.endswith("\nYour output: "):  # MMBench's option-matching prompt: its third example
            case = prompt.rsplit("Example 3: \n", 1)[1]
            lines = case.split("There are several options: \n", 1)[1].split("\n\nAnswer: ", 1)[0].splitlines()
            answer = case.rsplit("\nAnswer: ", 1)[1].removesuffix("\nYour output: ")
            if self.args.fail_on and self.args.fail_on in answer:
                return Response(request.id, error="HTTP 500: scripted judge failure")
            options = dict(line.split(". ", 1) for line in lines)
            hits = [letter for letter, text in options.items() if text.lower().removeprefix("a ") in answer.lower()]
            return Response(request.id, text=hits[0] if len(hits) == 1 else "E")
        if "[End of Assistant 2]" in prompt:  # LLaVA-Bench's review prompt
            reference = prompt.split("[Assistant 1]\n", 1)[1].split("\n\n[End of Assistant 1]", 1)[0]
            answer = prompt.split("[Assistant 2]\n", 1)[1].split("\n\n[End of Assistant 2]", 1)[0]
            if self.args.fail_on and self.args.fail_on in answer:
                return Response(request.id, error="HTTP 500: scripted judge failure")
            if self.args.garbage_on and self.args.garbage_on in answer:
                return Response(request.id, text="I would rather not grade this one.")
            score = (4 if self.args.harsh else 8) if answer.strip() == reference.strip() else 2
            return Response(request.id, text=f"8 {score}\nCompared with the reference (scripted).")
        if prompt.startswith("You are a strict evaluator assessing answer correctness."):  # lmms-eval's binary prompt
            truth = prompt.split("Ground Truth Answer:\n```\n", 1)[1].split("\n```\n", 1)[0].strip()
            answer = prompt.split("Model Prediction:\n```\n", 1)[1].split("\n```\n\n# Evaluation Rules", 1)[0]
            if self.args.fail_on and self.args.fail_on in answer:
                return Response(request.id, error="HTTP 500: scripted judge failure")
            if self.args.garbage_on and self.args.garbage_on in answer:
                return Response(request.id, text="I would rather not grade this one.")
            right = re.search(rf"(?<![\w.]){re.escape(truth)}\W*$", answer) is not None  # the answer ends with it
            return Response(request.id, text="1" if right else "0")
        if "\n\n[Ground Truth Response]\n\n" in prompt:  # LiveBench's prompt
            return self._live_bench(request, prompt)
        sections = dict(_SECTION.findall(prompt))
        answer = (sections.get("Answer to grade") or sections.get("Answer 2") or sections.get("Answer", "")).strip()
        if self.args.fail_on and self.args.fail_on in answer:
            return Response(request.id, error="HTTP 500: scripted judge failure")
        if self.args.garbage_on and self.args.garbage_on in answer:
            return Response(request.id, text="I would rather not grade this one.")
        references = [r.strip() for r in sections.get("Reference answer", sections.get("Ground truth", "")).split("|")]
        right = answer in references
        if '"option"' in prompt:
            options = dict(line.split(". ", 1) for line in sections["Options"].splitlines())
            hits = [letter for letter, text in options.items() if text.lower().removeprefix("a ") in answer.lower()]
            reply: dict[str, Any] = {"option": hits[0] if len(hits) == 1 else "Z"}
        elif "reference_score" in prompt:
            answer = sections["Answer 2"].strip()
            right = answer == sections["Answer 1"].strip()
            reply = {"reference_score": 8, "answer_score": (4 if self.args.harsh else 8) if right else 2}
        elif "<integer 0-10>" in prompt:
            reply = {"score": (5 if self.args.harsh else 10) if right else 0, "reason": "compared with the reference"}
        else:
            reply = {"score": (0.5 if self.args.harsh else 1.0) if right else 0.0}
        return Response(request.id, text=self._damage(reply), usage={"prompt_tokens": len(prompt.split())})

    def _live_bench(self, request: Request, prompt: str) -> Response:
        """LiveBench's judge: it needs the screenshots (without any the call fails) and lists their sizes
        in its Explanation; it rates 10 an answer equal to the reference, 5 one containing it (any case),
        else 0 (half with `harsh`). An answer holding `(rate N)` is rated N, `(rate "N")` the string "N";
        one holding `(fenced)` gets its reply in a ```json fence."""
        answer = prompt.split("[Assistant Response]\n\n", 1)[1].split("\n\n[Ground Truth Response]", 1)[0]
        reference = prompt.split("[Ground Truth Response]\n\n", 1)[1].split("\n\n[System]", 1)[0]
        images = request.messages[-1].images
        if not images:
            return Response(request.id, error="HTTP 400: scripted judge: no screenshot to judge against")
        if self.args.fail_on and self.args.fail_on in answer:
            return Response(request.id, error="HTTP 500: scripted judge failure")
        if self.args.garbage_on and self.args.garbage_on in answer:
            return Response(request.id, text="I would rather not grade this one.")
        rating: Any = 10 if answer == reference else 5 if reference.lower() in answer.lower() else 0
        rating = rating // 2 if self.args.harsh else rating
        if marked := _RATE.search(answer):
            number = float(marked.group(2))
            rating = marked.group(2) if marked.group(1) else int(number) if number.is_integer() else number
        seen = ", ".join(f"{i.width}x{i.height}" for i in images)
        reply = {"Explanation": f"Compared with the ground truth (scripted); screenshots: {seen}.", "Rating": rating}
        if "(fenced)" in answer:
            return Response(request.id, text=f"```json\n{json.dumps(reply)}\n```")
        return Response(request.id, text=self._damage(reply))

    def _damage(self, reply: dict[str, Any]) -> str:
        if self.args.damage == "strings":
            reply = {k: str(v) for k, v in reply.items()}
        text = json.dumps(reply)
        if self.args.damage == "fenced":
            return f"Here is my grade:\n```json\n{text}\n```"
        if self.args.damage == "prose":
            return f"After careful thought: {text} (I hope this helps.)"
        return text


def scripted_reply(prompt: str, args: JudgeArgs | None = None, images: Sequence[Image.Image] = ()) -> str | None:
    """The scripted judge's reply to `prompt` sent as one user message, after `images` (how the tests
    answer a judge call inside lmms-eval's code); None when the call fails."""
    request = Request("peer", "generate", (Message("user", (*(ImagePart(i) for i in images), TextPart(prompt))),))
    reply = ScriptedJudge(args or JudgeArgs()).answer(request)
    return None if reply.error is not None else reply.text or ""


MODELS.add("scripted_student", ScriptedStudent)
MODELS.add("scripted_judge", ScriptedJudge)
