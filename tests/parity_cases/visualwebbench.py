"""Parity fixtures of VisualWebBench's seven sub-tasks (rows from tests/test_tasks_visualwebbench.py).
The generic pool is built from the answer, an option index for the choice sub-tasks: these also get
letter answers, bracketed, in a sentence, several letters, and one running past a blank line."""

from __future__ import annotations

from parity_case import ParityCase
from test_tasks_visualwebbench import (
    CHOICE_DOCS,
    VISUALWEBBENCH_ACTION_GROUND,
    VISUALWEBBENCH_ACTION_PREDICTION,
    VISUALWEBBENCH_ELEMENT_GROUND,
    VISUALWEBBENCH_ELEMENT_OCR,
    VISUALWEBBENCH_HEADING_OCR,
    VISUALWEBBENCH_WEB_CAPTION,
    VISUALWEBBENCH_WEBQA,
    visualwebbench_action_ground_rows,
    visualwebbench_action_prediction_rows,
    visualwebbench_element_ground_rows,
    visualwebbench_element_ocr_rows,
    visualwebbench_heading_ocr_rows,
    visualwebbench_web_caption_rows,
    visualwebbench_webqa_rows,
)

from fastmmeval.extract.rules import LETTERS


def letter_answers(sub_task: str) -> dict[str, list[str]]:
    """Per doc id, responses naming the right option's letter (and the next one) in several shapes."""
    extra = {}
    for i, (fields, _, _) in enumerate(CHOICE_DOCS[sub_task]):
        right, wrong = LETTERS[fields["answer"]], LETTERS[fields["answer"] + 1]
        extra[str(i)] = [
            right, right.lower(), f"({right})", f"{right}.", f"The answer is {right}", wrong, f"{right}\n\nNot {wrong}",
            f"{wrong} or {right}", f"({right}) rather than ({wrong})",
        ]  # fmt: skip
    return extra


CASES = [
    ParityCase("visualwebbench_web_caption", visualwebbench_web_caption_rows, VISUALWEBBENCH_WEB_CAPTION),
    ParityCase("visualwebbench_heading_ocr", visualwebbench_heading_ocr_rows, VISUALWEBBENCH_HEADING_OCR),
    ParityCase("visualwebbench_element_ocr", visualwebbench_element_ocr_rows, VISUALWEBBENCH_ELEMENT_OCR),
    ParityCase("visualwebbench_webqa", visualwebbench_webqa_rows, VISUALWEBBENCH_WEBQA),
    ParityCase("visualwebbench_element_ground", visualwebbench_element_ground_rows, VISUALWEBBENCH_ELEMENT_GROUND,
               extra=letter_answers("element_ground")),
    ParityCase("visualwebbench_action_prediction", visualwebbench_action_prediction_rows,
               VISUALWEBBENCH_ACTION_PREDICTION, extra=letter_answers("action_prediction")),
    ParityCase("visualwebbench_action_ground", visualwebbench_action_ground_rows, VISUALWEBBENCH_ACTION_GROUND,
               extra=letter_answers("action_ground")),
]  # fmt: skip
