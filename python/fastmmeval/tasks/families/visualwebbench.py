"""VisualWebBench's seven sub-tasks scored as lmms-eval 0.7.3 scores them (`tasks/visualwebbench/utils.py`),
every value on 0-100 as there:

- web captioning, heading OCR and element OCR: the ROUGE-1, ROUGE-2 and ROUGE-L F-measures (x100) of
  the `rouge` package (pltrdy/rouge 1.0.1, which lmms-eval calls), ported here (`rouge_f`);
- WebQA: `f1_score`, the best ROUGE-1 F-measure (x100) over the doc's answers;
- element grounding, action prediction and action grounding: `accuracy`, 100 when the option letter
  read by lmms-eval's parse_multi_choice_response (`choice_letter`) is the answer index, else 0.

The `rouge` package is not pycocoevalcap's ROUGE-L (`metrics/caption.py`): a text is cut into
sentences at every "." (empty pieces dropped, each piece's whitespace runs collapsed and trimmed),
its words are those sentences split on single spaces, so a whitespace-only piece ("a. . b") is one
empty word; n-grams are counted once each (sets: the package's default `exclusive=True`) and run
across sentence ends; ROUGE-L is the summary-level union LCS, its LCS words also a set and the lengths
counted in distinct words; F is 2PR / (P + R + 1e-8), so a perfect match scores 99.999999... Case is kept.

As lmms-eval reads a response, it is stripped (its ConfigurableTask.process_results strips generated
text before the task's hook) and then, as its eval_* functions do, an empty one is read as " " (element
OCR: also a one-character one). One deliberate change: a text with no sentence (nothing but periods,
e.g. "..."), which makes the package raise ValueError and stops lmms-eval's run, scores 0 here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.errors import DocError
from fastmmeval.extract import EXTRACTORS, UNPARSED, Extraction
from fastmmeval.extract.rules import LETTERS
from fastmmeval.metrics import METRICS, Metric
from fastmmeval.metrics.base import already_on_100

# --- ROUGE as the `rouge` package computes it --------------------------------------------------

ROUGE_KEYS = ("rouge_1", "rouge_2", "rouge_l")
_F_EPSILON = 1e-8  # the package's term in the F-measure's denominator


def rouge_sentences(text: str) -> list[str]:
    """The package's sentences of `text`: its non-empty pieces between periods, each with whitespace runs
    collapsed to one space and trimmed (a whitespace-only piece becomes the empty sentence)."""
    return [" ".join(piece.split()) for piece in text.split(".") if piece]


def _words(sentences: Sequence[str]) -> list[str]:
    return [word for sentence in sentences for word in sentence.split(" ")]


def _f_measure(precision: float, recall: float) -> float:
    return 2.0 * ((precision * recall) / (precision + recall + _F_EPSILON))


def _rouge_n(hypothesis: Sequence[str], reference: Sequence[str], n: int) -> float:
    """ROUGE-N F over the distinct n-grams of the two word lists (0 for a side without one)."""
    hyp = {tuple(hypothesis[i : i + n]) for i in range(len(hypothesis) - n + 1)}
    ref = {tuple(reference[i : i + n]) for i in range(len(reference) - n + 1)}
    overlap = len(hyp & ref)
    return _f_measure(overlap / len(hyp) if hyp else 0.0, overlap / len(ref) if ref else 0.0)


def _lcs_words(reference: Sequence[str], hypothesis: Sequence[str]) -> set[str]:
    """The words of the longest common subsequence the package traces back (a match first, else up
    when that cell is strictly longer, else left), as a set."""
    table = [[0] * (len(hypothesis) + 1) for _ in range(len(reference) + 1)]
    for i, ref_word in enumerate(reference, 1):
        for j, hyp_word in enumerate(hypothesis, 1):
            table[i][j] = table[i - 1][j - 1] + 1 if ref_word == hyp_word else max(table[i - 1][j], table[i][j - 1])
    words: set[str] = set()
    i, j = len(reference), len(hypothesis)
    while i and j:
        if reference[i - 1] == hypothesis[j - 1]:
            words.add(reference[i - 1])
            i, j = i - 1, j - 1
        elif table[i - 1][j] > table[i][j - 1]:
            i -= 1
        else:
            j -= 1
    return words


def _rouge_l(hypothesis: Sequence[str], reference: Sequence[str]) -> float:
    """Summary-level ROUGE-L F: the distinct words of the LCS of every (reference, hypothesis)
    sentence pair, over the distinct words of each side."""
    union = set().union(*(_lcs_words(r.split(" "), h.split(" ")) for r in reference for h in hypothesis))
    return _f_measure(len(union) / len(set(_words(hypothesis))), len(union) / len(set(_words(reference))))


def rouge_f(hypothesis: str, reference: str) -> dict[str, float]:
    """{"rouge_1", "rouge_2", "rouge_l"}: the `rouge` package's F-measures (0-1) of one hypothesis
    against one reference; all 0 when either text has no sentence (where the package raises)."""
    hyp, ref = rouge_sentences(hypothesis), rouge_sentences(reference)
    if not hyp or not ref:
        return dict.fromkeys(ROUGE_KEYS, 0.0)
    hyp_words, ref_words = _words(hyp), _words(ref)
    return {
        "rouge_1": _rouge_n(hyp_words, ref_words, 1),
        "rouge_2": _rouge_n(hyp_words, ref_words, 2),
        "rouge_l": _rouge_l(hyp, ref),
    }


# --- what the metrics read -------------------------------------------------------------------


@EXTRACTORS.register("visualwebbench_text")
def visualwebbench_text(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """The response stripped, an empty one as " " (lmms-eval's eval_web_caption, eval_heading_ocr and
    eval_webqa)."""
    return Extraction(text.strip() or " ", "stripped")


@EXTRACTORS.register("visualwebbench_element_ocr_text")
def visualwebbench_element_ocr_text(
    text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None
) -> Extraction:
    """The response stripped, an empty or one-character one as " " (lmms-eval's eval_element_ocr)."""
    text = text.strip()
    return Extraction(text if len(text) > 1 else " ", "stripped")


CHOICE_LETTERS = LETTERS[:8]  # the candidates lmms-eval looks for, A-H, whatever the doc's option count
_DROPPED = (",", ".", "!", "?", ";", ":", "'", '"')


def choice_letter(response: str) -> tuple[str | None, str]:
    """(letter, rule) as lmms-eval's parse_multi_choice_response reads it, None where its reading is
    no letter A-Z (index -1 there): a one-character response upper-cased; "X." at the very start;
    else, with , . ! ? ; : ' " deleted, the last "(X)" of A-H, else the last X of A-H standing between
    single spaces (a letter next to a newline does not count)."""
    if len(response) == 1:
        letter = response.upper()  # may be two characters ("ß") or not a letter: no answer
        return (letter, "single_char") if len(letter) == 1 and "A" <= letter <= "Z" else (None, UNPARSED)
    if not response:
        return None, UNPARSED
    if "A" <= response[0] <= "Z" and response[1] == ".":
        return response[0], "letter_dot"
    for char in _DROPPED:
        response = response.replace(char, "")
    response = f" {response} "
    for rule, form in (("bracketed", "({})"), ("spaced", " {} ")):
        found = {c: response.rfind(form.format(c)) for c in CHOICE_LETTERS if form.format(c) in response}
        if found:
            return max(found, key=found.__getitem__), rule
    return None, UNPARSED


@EXTRACTORS.register("visualwebbench_choice")
def visualwebbench_choice(
    text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None
) -> Extraction:
    """The option letter `choice_letter` reads from the stripped response (unparsed: none)."""
    letter, rule = choice_letter(text.strip())
    return Extraction(letter, rule)


# --- metrics ---------------------------------------------------------------------------------


def _rouge_metric(key: str) -> Metric:
    def score(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> float:
        """The ROUGE F-measure x100 of the response against the doc's answer."""
        return 100 * rouge_f(prediction or " ", targets[0])[key]

    return Metric(f"visualwebbench_{key}", score, to_100=already_on_100)


def webqa_f1(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> float:
    """The best ROUGE-1 F-measure x100 of the response over the doc's answers (lmms-eval's eval_webqa)."""
    return 100 * max(rouge_f(prediction or " ", target)["rouge_1"] for target in targets)


def choice_accuracy(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any]) -> float:
    """100 when the letter's index (A = 0) is the doc's answer index, else 0 (also when unparsed)."""
    answer = targets[0]
    if not answer.isdecimal():
        raise DocError(f"visualwebbench: the answer must be an option index, got {answer!r}")
    return 100.0 if prediction is not None and LETTERS.index(prediction) == int(answer) else 0.0


# Per-doc values on 0-100 (lmms-eval's), mean with analytic stderr; headline: the first in the task file.
for _key in ROUGE_KEYS:
    METRICS.add(f"visualwebbench_{_key}", _rouge_metric(_key))
METRICS.add("visualwebbench_f1", Metric("visualwebbench_f1", webqa_f1, to_100=already_on_100))
METRICS.add("visualwebbench_accuracy", Metric("visualwebbench_accuracy", choice_accuracy, to_100=already_on_100))
