"""A pool of model responses for one doc, in the shapes real models answer in: right and wrong,
off-format, refusals, surrounding whitespace and newlines, the option's text for its letter, long
explanations that run past a blank line, unicode look-alikes."""

from __future__ import annotations

from fastmmeval.extract.rules import LETTERS
from fastmmeval.protocol import Doc
from fastmmeval.tasks.task import Task

REFUSALS = ("I cannot answer that from the image.", "", "Sorry, I am not able to help with this request.")


def response_pool(task: Task, doc: Doc) -> list[str]:
    """Responses to score for `doc`, built from its target (and options for multiple choice)."""
    options = task.options(doc)
    return _choice_pool(task, doc, options) if options else _text_pool(task.targets(doc)[0])


def _choice_pool(task: Task, doc: Doc, options: list[str]) -> list[str]:
    right = task.targets(doc)[0]
    text = options[LETTERS.index(right)]
    wrong = LETTERS[(LETTERS.index(right) + 1) % len(options)]
    wrong_text = options[LETTERS.index(wrong)]
    return [
        right, f"{right}.", f"({right})", right.lower(), f" {right}\n", f"{right}. {text}", text,
        f"The answer is {right}.", f"Answer: ({right}) {text}",
        f"Looking at the image carefully, the correct option is {right} because it matches what is shown.",
        f"{right}\n\nExplanation: the other options, such as {wrong}, do not fit.",
        f"I think it is {wrong}.\n\nOn second thought the answer is {right}.",
        wrong, wrong_text, f"({wrong}) {wrong_text}", chr(0xFF21 + LETTERS.index(right)),  # its full-width letter
        f"答案是{right}", f"**{right}**", *REFUSALS,
    ]  # fmt: skip


def _text_pool(target: str) -> list[str]:
    return [
        target, target.upper(), target.lower(), f" {target} \n", f"{target}.", f"The answer is {target}.",
        f"{target}\n\nThis is because the image shows it clearly.", f"It is not clear.\n\n{target}",
        f"“{target}”", target.replace(" ", "  "), f"{target}s", "zebra crossing", "42", *REFUSALS,
    ]  # fmt: skip
