"""Open-ended VQA metrics, each computed as its benchmark's official scorer computes it.

- `vqa_accuracy`: VQAv2 and OK-VQA (the official VQA evaluation script, GT-Vision-Lab/VQA).
- `textvqa_accuracy`: TextVQA (mmf's TextVQAAccuracyEvaluator, the EvalAI answer processor on
  both sides); lmms-eval 0.7.3 also scores OK-VQA and VizWiz this way.
- `vizwiz_accuracy`: VizWiz-VQA (the VizWiz evaluation script).
- `anls`: DocVQA and InfographicVQA (average normalized Levenshtein similarity, threshold 0.5).
- `relaxed_accuracy`: ChartQA (5% relative tolerance for numbers, exact match otherwise).

Each VQA accuracy averages min(1, matches / 3) over the leave-one-out subsets of the annotator
answers (10 for VQAv2, TextVQA and VizWiz), where matches counts the other annotators whose
answer equals the prediction after normalization.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.metrics.base import METRICS, Metric
from fastmmeval.metrics.edit_distance import levenshtein_similarities

# The official contractions table, oddities included: the capitalised keys never match (answers
# are lower-cased first), "let's" and "she's" map to themselves, "somebody'd" loses its quote.
CONTRACTIONS: dict[str, str] = {
    "aint": "ain't", "arent": "aren't", "cant": "can't", "couldve": "could've", "couldnt": "couldn't",
    "couldn'tve": "couldn't've", "couldnt've": "couldn't've", "didnt": "didn't", "doesnt": "doesn't",
    "dont": "don't", "hadnt": "hadn't", "hadnt've": "hadn't've", "hadn'tve": "hadn't've", "hasnt": "hasn't",
    "havent": "haven't", "hed": "he'd", "hed've": "he'd've", "he'dve": "he'd've", "hes": "he's",
    "howd": "how'd", "howll": "how'll", "hows": "how's", "Id've": "I'd've", "I'dve": "I'd've", "Im": "I'm",
    "Ive": "I've", "isnt": "isn't", "itd": "it'd", "itd've": "it'd've", "it'dve": "it'd've", "itll": "it'll",
    "let's": "let's", "maam": "ma'am", "mightnt": "mightn't", "mightnt've": "mightn't've",
    "mightn'tve": "mightn't've", "mightve": "might've", "mustnt": "mustn't", "mustve": "must've",
    "neednt": "needn't", "notve": "not've", "oclock": "o'clock", "oughtnt": "oughtn't",
    "ow's'at": "'ow's'at", "'ows'at": "'ow's'at", "'ow'sat": "'ow's'at", "shant": "shan't",
    "shed've": "she'd've", "she'dve": "she'd've", "she's": "she's", "shouldve": "should've",
    "shouldnt": "shouldn't", "shouldnt've": "shouldn't've", "shouldn'tve": "shouldn't've",
    "somebody'd": "somebodyd", "somebodyd've": "somebody'd've", "somebody'dve": "somebody'd've",
    "somebodyll": "somebody'll", "somebodys": "somebody's", "someoned": "someone'd",
    "someoned've": "someone'd've", "someone'dve": "someone'd've", "someonell": "someone'll",
    "someones": "someone's", "somethingd": "something'd", "somethingd've": "something'd've",
    "something'dve": "something'd've", "somethingll": "something'll", "thats": "that's",
    "thered": "there'd", "thered've": "there'd've", "there'dve": "there'd've", "therere": "there're",
    "theres": "there's", "theyd": "they'd", "theyd've": "they'd've", "they'dve": "they'd've",
    "theyll": "they'll", "theyre": "they're", "theyve": "they've", "twas": "'twas", "wasnt": "wasn't",
    "wed've": "we'd've", "we'dve": "we'd've", "weve": "we've", "werent": "weren't", "whatll": "what'll",
    "whatre": "what're", "whats": "what's", "whatve": "what've", "whens": "when's", "whered": "where'd",
    "wheres": "where's", "whereve": "where've", "whod": "who'd", "whod've": "who'd've",
    "who'dve": "who'd've", "wholl": "who'll", "whos": "who's", "whove": "who've", "whyll": "why'll",
    "whyre": "why're", "whys": "why's", "wont": "won't", "wouldve": "would've", "wouldnt": "wouldn't",
    "wouldnt've": "wouldn't've", "wouldn'tve": "wouldn't've", "yall": "y'all", "yall'll": "y'all'll",
    "y'allll": "y'all'll", "yall'd've": "y'all'd've", "y'alld've": "y'all'd've", "y'all'dve": "y'all'd've",
    "youd": "you'd", "youd've": "you'd've", "you'dve": "you'd've", "youll": "you'll", "youre": "you're",
    "youve": "you've",
}  # fmt: skip
NUMBER_WORDS: dict[str, str] = {
    "none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
    "seven": "7", "eight": "8", "nine": "9", "ten": "10",
}  # fmt: skip
ARTICLES = frozenset({"a", "an", "the"})
PUNCTUATION = (";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`", ",", "?", "!")
# A comma between two digits ("1,000") makes every punctuation mark vanish instead of becoming a space.
_DIGIT_COMMA_DIGIT = re.compile(r"(\d)(,)(\d)")
# The official pattern is "(?!<=\d)(\.)(?!\d)": its "(?!<=\d)" is a look-ahead that always holds
# before a '.', so it removes every period not followed by a digit ("1.5" keeps its period).
_PERIOD = re.compile(r"\.(?!\d)")
# The official script passes re.UNICODE (32) where re.sub takes its count: at most 32 periods go.
_PERIOD_COUNT = 32


def process_punctuation(text: str) -> str:
    """The official `processPunctuation`: each mark is deleted when it touches a space in `text`
    (or `text` has a digit,digit comma), else replaced by a space; then periods not followed by a
    digit are deleted."""
    delete_all = _DIGIT_COMMA_DIGIT.search(text) is not None
    out = text
    for mark in PUNCTUATION:
        if delete_all or mark + " " in text or " " + mark in text:
            out = out.replace(mark, "")
        else:
            out = out.replace(mark, " ")
    return _PERIOD.sub("", out, count=_PERIOD_COUNT)


def process_digit_article(text: str) -> str:
    """The official `processDigitArticle`: lower-case, split on whitespace, number words zero to
    ten become digits, articles go, contractions get their apostrophe; words joined by one space."""
    words = [NUMBER_WORDS.get(w, w) for w in text.lower().split()]
    return " ".join(CONTRACTIONS.get(w, w) for w in words if w not in ARTICLES)


def normalize_vqa_answer(answer: str) -> str:
    """A prediction as the official VQA and VizWiz scripts normalize it (tabs and newlines become
    spaces, then punctuation, then number words, articles and contractions)."""
    text = answer.replace("\n", " ").replace("\t", " ").strip()
    return process_digit_article(process_punctuation(text))


def normalize_evalai_answer(answer: str) -> str:
    """An answer through mmf's EvalAIAnswerProcessor: lower-case, delete every ',' and '?',
    split "'s" off its word, then as `normalize_vqa_answer`."""
    text = answer.lower().replace(",", "").replace("?", "").replace("'s", " 's").strip()
    return normalize_vqa_answer(text)


def leave_one_out_accuracy(prediction: str, answers: Sequence[str]) -> float:
    """Mean over each annotator left out of min(1, (other answers equal to prediction) / 3)."""
    if not answers:
        return 0.0
    hits = [answer == prediction for answer in answers]
    total = sum(hits)
    return sum(min(1.0, (total - hit) / 3) for hit in hits) / len(answers)


def vqa_accuracy(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any] | None = None) -> float:
    """VQA accuracy as the official VQA evaluation script (VQAv2, OK-VQA) computes it.

    `targets` are the annotator answers (10 for VQAv2). The prediction is normalized
    (`normalize_vqa_answer`); the answers are used as stored (the annotation files hold them
    normalized) except that punctuation is processed when they are not all the same.

    Deliberate differences from lmms-eval 0.7.3 (`vqav2_process_results`): it strips every
    answer and puts it through punctuation *and* number-word / article / contraction processing
    even when all answers agree, so stored answers such as "Two" or "a dog" can match there and
    not in the official script; and it takes the digit-comma rule from mmf (`(?<=\\d),+(?=\\d)`,
    which also fires on "1,,2") where the official script uses `(\\d)(,)(\\d)`.
    """
    if prediction is None:
        return 0.0
    answers = list(targets)
    if len(set(answers)) > 1:
        answers = [process_punctuation(a) for a in answers]
    return leave_one_out_accuracy(normalize_vqa_answer(prediction), answers)


def textvqa_accuracy(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any] | None = None) -> float:
    """VQA accuracy as TextVQA's evaluator (mmf TextVQAAccuracyEvaluator) computes it: the
    prediction and every answer through `normalize_evalai_answer`. Equal to lmms-eval 0.7.3's
    textvqa, ok_vqa and vizwiz_vqa scores (up to the last bit: it averages with statistics.mean,
    the official scripts and we with sum / len)."""
    if prediction is None:
        return 0.0
    answers = [normalize_evalai_answer(a) for a in targets]
    return leave_one_out_accuracy(normalize_evalai_answer(prediction), answers)


def vizwiz_accuracy(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any] | None = None) -> float:
    """VQA accuracy as the VizWiz-VQA evaluation script computes it: the prediction normalized
    (`normalize_vqa_answer`), the answers used exactly as stored.

    lmms-eval 0.7.3 scores VizWiz with the TextVQA evaluator instead (`textvqa_accuracy`), which
    also normalizes the answers and deletes commas, '?' and splits "'s" in both."""
    if prediction is None:
        return 0.0
    return leave_one_out_accuracy(normalize_vqa_answer(prediction), list(targets))


ANLS_THRESHOLD = 0.5


def normalize_anls_answer(answer: str) -> str:
    """Lower-cased, whitespace runs collapsed to one space, ends trimmed."""
    return " ".join(answer.lower().split())


def anls_scores(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> list[float]:
    """Per question, the best normalized Levenshtein similarity of its prediction to any of its
    references (0 below `ANLS_THRESHOLD`, 0 without references), in one native call."""
    left: list[str] = []
    right: list[str] = []
    for prediction, refs in zip(predictions, references, strict=True):
        pred = normalize_anls_answer(prediction)
        for ref in refs:
            left.append(pred)
            right.append(normalize_anls_answer(ref))
    similarities = levenshtein_similarities(left, right).tolist()
    out: list[float] = []
    start = 0
    for refs in references:
        best = max(similarities[start : start + len(refs)], default=0.0)
        start += len(refs)
        out.append(best if best >= ANLS_THRESHOLD else 0.0)
    return out


def anls(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any] | None = None) -> float:
    """ANLS of one question (DocVQA, InfographicVQA): 1 - Levenshtein distance / the longer
    length, both strings lower-cased and whitespace-normalized, best over the references, 0 when
    below 0.5. Lengths are counted in code points of the normalized strings.

    Deliberate difference from lmms-eval 0.7.3 (`lmms_eval.api.metrics.anls`): it divides the
    distance of the normalized strings by `max(len(raw_reference.upper()), len(raw_prediction.upper()))`,
    the lengths before normalization, so extra or surrounding whitespace (and characters that
    upper-case to several, like 'ß') shrink the normalized distance and inflate the score.
    """
    if prediction is None:
        return 0.0
    return anls_scores([prediction], [list(targets)])[0]


RELAXED_TOLERANCE = 0.05


def _chart_number(text: str) -> float | None:
    """`text` as a float ("12%" is 0.12), or None when Python's float() rejects it."""
    try:
        return float(text.rstrip("%")) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        return None


def relaxed_correct(prediction: str, target: str, tolerance: float = RELAXED_TOLERANCE) -> bool:
    """ChartQA relaxed correctness (Pix2Struct / MatCha): when both parse as numbers and the target
    is not zero, |prediction - target| / |target| <= tolerance; otherwise case-insensitive equality."""
    predicted, expected = _chart_number(prediction), _chart_number(target)
    if predicted is None or not expected:
        return prediction.lower() == target.lower()
    return abs(predicted - expected) / abs(expected) <= tolerance


def relaxed_accuracy(prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any] | None = None) -> float:
    """1.0 when the prediction is relaxed-correct for any target (`relaxed_correct`), else 0.0.

    Same as lmms-eval 0.7.3's chartqa `relaxed_correctness`: the text is used as is (no
    stripping), numbers are what Python's float() accepts ("1,234" is not a number, "1_234",
    "inf" and "nan" are; a NaN never matches), a trailing '%' divides by 100, and a zero target
    needs an exact string match."""
    if prediction is None:
        return 0.0
    return float(any(relaxed_correct(prediction, t) for t in targets))


METRICS.add("vqa_accuracy", Metric("vqa_accuracy", vqa_accuracy))
METRICS.add("textvqa_accuracy", Metric("textvqa_accuracy", textvqa_accuracy))
METRICS.add("vizwiz_accuracy", Metric("vizwiz_accuracy", vizwiz_accuracy))
METRICS.add("anls", Metric("anls", anls))
METRICS.add("relaxed_accuracy", Metric("relaxed_accuracy", relaxed_accuracy))
