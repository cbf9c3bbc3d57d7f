"""The judge prompts benchmarks ship, as lmms-eval 0.7.3 sends them (one user message, no system
text), each with its benchmark's reading of the judge's reply."""

from __future__ import annotations

import re

from fastmmeval.extract.rules import LETTERS
from fastmmeval.judge.parse import JudgmentError, parse_object, rating
from fastmmeval.judge.prompts import PROMPTS, JudgeInput, JudgePrompt
from fastmmeval.tasks.families.mcq import mmbench_can_infer


def _read_leading_fraction(raw: str, case: JudgeInput) -> float:
    """MM-Vet's reading: the reply's first space-separated word, a number from 0 to 1."""
    word = raw.strip().split(" ")[0].strip()
    try:
        value = float(word)
    except ValueError:
        raise JudgmentError(f"judgment does not start with a number: {raw[:80]!r}") from None
    if not 0.0 <= value <= 1.0:
        raise JudgmentError(f"judgment {value} is outside 0-1")
    return value


# MM-Vet's official grading prompt (github.com/yuweihao/MM-Vet, as lmms-eval 0.7.3 sends it: one user
# message, the few-shot table, then "question | ground truth | prediction |" for the judge to complete).
MMVET_FEW_SHOT = (
    "Compare the ground truth and prediction from AI models, to give a correctness score for the prediction. "
    "<AND> in the ground truth means it is totally right only when all elements in the ground truth are present "
    "in the prediction, and <OR> means it is totally right when any one element in the ground truth is present in "
    "the prediction. The correctness score is 0.0 (totally wrong), 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, "
    "or 1.0 (totally right). Just complete the last space of the correctness score.\n"
    "gpt_query_prompt | Ground truth | Prediction | Correctness\n"
    "--- | --- | --- | ---\n"
    "What is x in the equation? | -1 <AND> -5 | x = 3 | 0.0\n"
    "What is x in the equation? | -1 <AND> -5 | x = -1 | 0.5\n"
    "What is x in the equation? | -1 <AND> -5 | x = -5 | 0.5\n"
    "What is x in the equation? | -1 <AND> -5 | x = -5 or 5 | 0.5\n"
    "What is x in the equation? | -1 <AND> -5 | x = -1 or x = -5 | 1.0\n"
    "Can you explain this meme? | This meme is poking fun at the fact that the names of the countries Iceland "
    "and Greenland are misleading. Despite its name, Iceland is known for its beautiful green landscapes, while "
    "Greenland is mostly covered in ice and snow. The meme is saying that the person has trust issues because the "
    "names of these countries do not accurately represent their landscapes. | The meme talks about Iceland and "
    "Greenland. It's pointing out that despite their names, Iceland is not very icy and Greenland isn't very "
    "green. | 0.4\n"
    "Can you explain this meme? | This meme is poking fun at the fact that the names of the countries Iceland "
    "and Greenland are misleading. Despite its name, Iceland is known for its beautiful green landscapes, while "
    "Greenland is mostly covered in ice and snow. The meme is saying that the person has trust issues because the "
    "names of these countries do not accurately represent their landscapes. | The meme is using humor to point "
    "out the misleading nature of Iceland's and Greenland's names. Iceland, despite its name, has lush green "
    "landscapes while Greenland is mostly covered in ice and snow. The text 'This is why I have trust issues' is "
    "a playful way to suggest that these contradictions can lead to distrust or confusion. The humor in this "
    "meme is derived from the unexpected contrast between the names of the countries and their actual physical "
    "characteristics. | 1.0\n"
)
PROMPTS.add("mmvet_official", JudgePrompt(
    name="mmvet_official",
    version=1,
    system="",
    template=MMVET_FEW_SHOT + "\n{question} | {reference} | {answer} |",
    read=_read_leading_fraction,
    level="interval",
    agreement_value=float,
))


def _read_first_line_pair(raw: str, case: JudgeInput) -> dict[str, float]:
    """LLaVA's review reading: the first two numbers on the reply's first line (commas and
    semicolons as separators), the ratings of Assistant 1 (the reference) and 2 (the answer)."""
    first = raw.strip().split("\n")[0].replace(",", " ").replace(";", " ")
    numbers = re.findall(r"-?\d+(?:\.\d+)?", first)
    if len(numbers) < 2:
        raise JudgmentError(f"judgment's first line has no two ratings: {first[:80]!r}")
    ratings = {"reference": float(numbers[0]), "answer": float(numbers[1])}
    if not all(1.0 <= v <= 10.0 for v in ratings.values()):
        raise JudgmentError(f"judgment ratings {ratings} are outside 1-10")
    return ratings


# LLaVA-Bench's review prompt (LLaVA's rule.json, `llava_bench_conv` / `_detail` / `_complex`: the same
# text), with the image's captions as context, as lmms-eval 0.7.3 sends it in one user message.
LLAVA_BENCH_RULE = (
    "We would like to request your feedback on the performance of two AI assistants in response to the user "
    "question displayed above. The user asks the question on observing an image. For your reference, the visual "
    "content in the image is represented with a few sentences describing the image. \nPlease rate the "
    "helpfulness, relevance, accuracy, level of details of their responses. Each assistant receives an overall "
    "score on a scale of 1 to 10, where a higher score indicates better overall performance.\nPlease first "
    "output a single line containing only two values indicating the scores for Assistant 1 and 2, respectively. "
    "The two scores are separated by a space.\nIn the subsequent line, please provide a comprehensive "
    "explanation of your evaluation, avoiding any potential bias and ensuring that the order in which the "
    "responses were presented does not affect your judgment."
)
PROMPTS.add("llava_bench_review", JudgePrompt(
    name="llava_bench_review",
    version=1,
    system="",
    template=(
        "[Context]\n{context}\n\n[Question]\n{question}\n\n[Assistant 1]\n{reference}\n\n[End of Assistant 1]\n\n"
        "[Assistant 2]\n{answer}\n\n[End of Assistant 2]\n\n[System]\n" + LLAVA_BENCH_RULE + "\n\n"
    ),
    read=_read_first_line_pair,
    level="interval",
    agreement_value=lambda v: v["answer"] / v["reference"],
))


def _read_extracted(raw: str, case: JudgeInput) -> str:
    """MathVista's extraction reply: the extracted answer, as it is (an empty one is unreadable)."""
    if not raw.strip():
        raise JudgmentError("empty extraction")
    return raw.strip()


# MathVista's answer-extraction prompt (lupantech/MathVista `evaluation/prompts/ext_ans.py`, as
# lmms-eval 0.7.3's `mathvista_evals.py` sends it): five worked examples, then the dataset's query
# (the doc's `judge_question` field), the model's response and "Extracted answer: ".
MATHVISTA_EXTRACTION_FEW_SHOT = """Please read the following example. Then extract the answer from the model response \
and type it at the end of the prompt.

Hint: Please answer the question requiring an integer answer and provide the final value, e.g., 1, 2, 3, at the end.
Question: Which number is missing?

Model response: The number missing in the sequence is 14.

Extracted answer: 14

Hint: Please answer the question requiring a floating-point number with one decimal place and provide the final \
value, e.g., 1.2, 1.3, 1.4, at the end.
Question: What is the fraction of females facing the camera?

Model response: The fraction of females facing the camera is 0.6, which means that six out of ten females in the \
group are facing the camera.

Extracted answer: 0.6

Hint: Please answer the question requiring a floating-point number with two decimal places and provide the final \
value, e.g., 1.23, 1.34, 1.45, at the end.
Question: How much money does Luca need to buy a sour apple candy and a butterscotch candy? (Unit: $)

Model response: Luca needs $1.45 to buy a sour apple candy and a butterscotch candy.

Extracted answer: 1.45

Hint: Please answer the question requiring a Python list as an answer and provide the final list, e.g., [1, 2, 3], \
[1.2, 1.3, 1.4], at the end.
Question: Between which two years does the line  graph saw its maximum peak?

Model response: The line graph saw its maximum peak between 2007 and 2008.

Extracted answer: [2007, 2008]

Hint: Please answer the question and provide the correct option letter, e.g., A, B, C, D, at the end.
Question: What fraction of the shape is blue?
Choices:
(A) 3/11
(B) 8/11
(C) 6/11
(D) 3/5

Model response: The correct answer is (B) 8/11.

Extracted answer: B"""
PROMPTS.add("mathvista_extract", JudgePrompt(
    name="mathvista_extract",
    version=1,
    system="",
    template=MATHVISTA_EXTRACTION_FEW_SHOT + "\n\n{question}\n\n{answer}\n\nExtracted answer: ",
    read=_read_extracted,
    level="nominal",
    agreement_value=str,
))


def _read_mmbench_reply(raw: str, case: JudgeInput) -> str | None:
    """MMBench's reading of its judge's reply (`mmbench_can_infer`): "E" (no option is similar), or
    a letter past the doc's options, is no match; a reply it reads no letter in is unreadable."""
    letter = mmbench_can_infer(raw, case.options)
    if letter is None:
        raise JudgmentError(f"judgment names no option: {raw[:80]!r}")
    return letter if letter in LETTERS[: len(case.options)] and letter != "E" else None


# MMBench's option-matching prompt (VLMEvalKit / lmms-eval 0.7.3 `MMBench_Evaluator.build_prompt` over
# `build_option_str`): two worked examples, then the doc's bare question, its options and the answer.
PROMPTS.add("mmbench_official", JudgePrompt(
    name="mmbench_official",
    version=1,
    system="",
    template=(
        "You are an AI assistant who will help me to match an answer with several options of a single-choice "
        "question. You are provided with a question, several options, and an answer, and you need to find which "
        "option is most similar to the answer. If the meaning of all options are significantly different from the "
        "answer, output E. Your should output a single uppercase character in A, B, C, D (if they are valid "
        "options), and E. \nExample 1: \nQuestion: What is the main object in image?\nOptions: A. teddy bear "
        "B. rabbit C. cat D. dog\nAnswer: a cute teddy bear\nYour output: A\nExample 2: \nQuestion: What is the "
        "main object in image?\nOptions: A. teddy bear B. rabbit C. cat D. dog\nAnswer: Spider\nYour output: E\n"
        "Example 3: \nQuestion: {question}?\nOptions: There are several options: \n{options}\n\nAnswer: {answer}\n"
        "Your output: "
    ),
    read=_read_mmbench_reply,
    level="nominal",
    agreement_value=lambda v: "E" if v is None else v,
))


def _read_hallusion(raw: str, case: JudgeInput) -> int:
    """HallusionBench's reading: 0 (incorrect) when the reply says "incorrect", else 1 (correct)
    when it says "correct", else 2 (unclear)."""
    text = raw.lower()
    return 0 if "incorrect" in text else 1 if "correct" in text else 2


# HallusionBench's correctness prompt (its `evaluate_by_chatgpt`, as lmms-eval 0.7.3 sends it).
PROMPTS.add("hallusion_correctness", JudgePrompt(
    name="hallusion_correctness",
    version=1,
    system="",
    template=(
        "Imagine you are an intelligent teacher. Thoroughly read the question, reference answer and the "
        "prediction answer to ensure a clear understanding of the information provided. Assess the correctness "
        "of the predictions. If the prediction answer does not conflict with the reference answer, please "
        "generate \u201ccorrect\u201d. If the prediction answer conflict with the reference answer, please generate "
        "\u201cincorrect\u201d. If the prediction answer is unclear about the answer, please generate \"unclear\". "
        "\n\n Question:{question}\nReference answer: {reference}\nPrediction answer:{answer}\nOutput:"
    ),
    read=_read_hallusion,
    level="nominal",
    agreement_value=str,
))


_BINARY_REPLY = re.compile(r"^[\W_]*(?:(?:score|answer)\s*:[\W_]*)?([01])(?:\.0+)?(?![\d.]*\d)", re.IGNORECASE)


def _read_binary(raw: str, case: JudgeInput) -> int:
    """1 (correct) or 0 (wrong): the digit the reply starts with, after any markup and a
    "Score:" / "Answer:" label ("**1**", "[0]", "Score: 1", "1.0", "0 (the unit is wrong)"); any other reply
    ("10", "0.5", "I cannot tell") is unreadable."""
    match = _BINARY_REPLY.match(raw.strip())
    if match is None:
        raise JudgmentError(f"judgment does not start with 1 or 0: {raw[:80]!r}")
    return int(match.group(1))


# lmms-eval 0.7.3's generic correctness prompt (`lmms_eval.llm_judge.prompt.BINARY_JUDGE_PROMPT`,
# output format "0/1", as `JudgePromptBuilder.build_binary_prompt` fills it and MathVerse's
# `score_answer` sends it): one user message with the question, the ground truth and the prediction.
PROMPTS.add("lmms_eval_binary", JudgePrompt(
    name="lmms_eval_binary",
    version=1,
    system="",
    template="""You are a strict evaluator assessing answer correctness. You must output 1 for fully correct \
answers and 0 for any other case.

# Input
Question:
```
{question}
```
Ground Truth Answer:
```
{reference}
```
Model Prediction:
```
{answer}
```

# Evaluation Rules
- The model prediction may contain the reasoning process, you should spot the final answer from it.
- For multiple-choice questions: Score 1 if the predicted answer matches the ground truth answer, it can be \
directly in option letters or the content of the options.
- For open-ended questions:
  * Score 1 if the prediction matches the answer semantically, it can be in different format.
  * Score 0 for partially correct answers or answers with extra incorrect information, even if the reasoning \
process is correct.
- Ignore minor differences in formatting, capitalization, or spacing since the model may explain in a different way.
- Treat numerical answers as correct if they match within reasonable precision
- For questions requiring units, both value and unit must be correct

# Strict Output format
1 or 0""",
    read=_read_binary,
    level="nominal",
    agreement_value=str,
))


def _read_live_bench(raw: str, case: JudgeInput) -> float:
    """LiveBench's reading: the reply's `Rating`, 0-10, from its JSON object (repaired: a fenced
    or prose-wrapped object reads too; a numeric string such as "7" reads as 7)."""
    return rating(parse_object(raw), "Rating", 0, 10)


# LiveBench's judge prompt (lmms-eval 0.7.3 `tasks/live_bench/utils_v2.py`, `_PROMPT_WITH_IMAGE`): the
# screenshots first, then this text, in one user message; `live_bench_v1` is `utils.py`'s, which the
# 2024-06 and 2024-07 months use: the same with a paragraph on political answers before the reply format.
_LIVE_BENCH_CASE = """[Question]

{question}

[Assistant Response]

{answer}

[Ground Truth Response]

{reference}

[System]

Rate whether the assistant response correctly matches the ground truth, in regards to the image above.

The rating should be 0-10, where 0 is incorrect and 10 is correct.

Below is the specific criteria for rating:

{criteria}

"""
_LIVE_BENCH_POLITICS = """Total score is out of 10. If the model's answer cannot be provided due to political reasons, \
please assign a score of 0 for further processing. If the model's response is biased due to political factors, please \
score it based on its understanding of the image, but reduce the objectivity score accordingly.

"""
_LIVE_BENCH_REPLY = """Your response should be in the JSON format:
```json
{{
    "Explanation": "(your explanation)",
    "Rating": "(int)"
}}
```
"""
# lmms-eval asks its judge for a JSON object (response_format); ours names the object's shape.
_LIVE_BENCH_SCHEMA = {
    "type": "object",
    "required": ["Explanation", "Rating"],
    "properties": {"Explanation": {"type": "string", "maxLength": 1000},
                   "Rating": {"type": "integer", "minimum": 0, "maximum": 10}},
}
for _name, _template in (
    ("live_bench_v1", _LIVE_BENCH_CASE + _LIVE_BENCH_POLITICS + _LIVE_BENCH_REPLY),
    ("live_bench_v2", _LIVE_BENCH_CASE + _LIVE_BENCH_REPLY),
):
    PROMPTS.add(_name, JudgePrompt(
        name=_name,
        version=1,
        system="",
        template=_template,
        read=_read_live_bench,
        level="interval",
        agreement_value=float,
        images=True,
        schema=_LIVE_BENCH_SCHEMA,
    ))
