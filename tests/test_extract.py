"""Answer extraction: option letters, yes/no conventions, numbers, MathVista normalization."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from fastmmeval.errors import DocError
from fastmmeval.extract import EXTRACTORS, UNPARSED
from fastmmeval.extract.options import REJECT_TO_ANSWER, can_infer_option, can_infer_text
from fastmmeval.extract.rules import answer_part
from fastmmeval.tasks.families.mathvista import get_most_similar, normalize_extracted_answer

OPTIONS = ["cat", "rocket", "coffee cup", "horse"]


def extract(name: str, text: str, options: list[str] | None = None, fields: dict[str, Any] | None = None):
    got = EXTRACTORS.get(name)(text, options or [], fields)
    return got.value, got.rule


@pytest.mark.parametrize(
    ("text", "letter", "rule"),
    [
        # a standalone letter, bare or wrapped
        ("B", "B", "letter"),
        ("  C\n", "C", "letter"),
        ("(C)", "C", "letter"),
        ("D. horse", "D", "letter"),
        ("D.", "D", "letter"),
        ("B:", "B", "letter"),
        ("B)", "B", "letter"),
        ("[B]", "B", "letter"),
        ("**B**", "B", "letter"),
        ("Option B", "B", "letter"),
        ("I choose C; it is right.", "C", "letter"),
        ("The answer is B.", "B", "answer_is+letter"),
        ("The answer is (B)", "B", "answer_is+letter"),
        ("The correct answer is: D", "D", "answer_is+letter"),
        ("Answer: C", "C", "answer_is+letter"),
        ("The answer is A.", "A", "answer_is+letter"),
        # unicode: full-width letters and brackets, non-breaking space, CJK text
        ("（Ｂ）", "B", "letter"),
        ("Ｃ", "C", "letter"),
        ("答案是 B", "B", "letter"),
        ("B\u00a0", "B", "letter"),
        # the article rule: a bare "A" in more than three words is the article ...
        ("A cat sits on a mat", "A", "option_text"),
        ("A horse is running fast", "D", "option_text"),
        ("A small animal is shown here", None, UNPARSED),
        # ... but a short answer or a wrapped A is the letter
        ("A cat", "A", "letter"),
        ("A. cat", "A", "letter"),
        ("A. It is a rocket", "A", "letter"),
        ("(A) is the one I pick", "A", "letter"),
        # option texts, case-insensitive, when exactly one occurs
        ("It is a rocket", "B", "option_text"),
        ("ROCKET", "B", "option_text"),
        ("a Coffee Cup on a table", "C", "option_text"),
        ("Answer: the horse", "D", "answer_is+option_text"),
        # never a guess: several letters, several texts, nothing, lower-case letters
        ("A or B", None, UNPARSED),
        ("B, C", None, UNPARSED),
        ("Either C or D.", None, UNPARSED),
        ("a cat and a horse", None, UNPARSED),
        ("I cannot answer that.", None, UNPARSED),
        ("I cannot tell", None, UNPARSED),
        ("b", None, UNPARSED),
        ("", None, UNPARSED),
        ("The answer is not A, it is B", None, UNPARSED),
        ("E", None, UNPARSED),  # not one of the four options
        # refusals and "none of the options"
        ("Cannot determine the answer", None, "refusal"),
        ("Cannot determine the answer. B", None, "refusal"),
        ("I'm sorry, but without the image provided I can't say.", None, "refusal"),
        ("Z", None, "none_of_the_options"),
        ("Z. None of these", None, "none_of_the_options"),
    ],
)
def test_option_letters_are_read_and_never_guessed(text: str, letter: str | None, rule: str) -> None:
    assert extract("option_letter", text, OPTIONS) == (letter, rule)


def test_every_refusal_phrase_of_vlmevalkit_is_a_refusal() -> None:
    for phrase in REJECT_TO_ANSWER:
        assert extract("option_letter", f"Well. {phrase} B", OPTIONS) == (None, "refusal")


def test_options_that_contain_each_other_are_ambiguous_as_upstream() -> None:
    options = ["cat", "black cat", "dog"]
    assert extract("option_letter", "It is a black cat", options) == (None, UNPARSED)
    assert extract("option_letter", "It is a cat", options) == ("A", "option_text")
    assert extract("option_letter", "B. black cat", options) == ("B", "letter")
    # substring, as upstream: "category" contains "cat"
    assert extract("option_letter", "This category", ["cat", "dog"]) == ("A", "option_text")


def test_letters_are_limited_to_the_options_and_default_to_a_to_d() -> None:
    assert extract("option_letter", "E", [*OPTIONS, "fish"]) == ("E", "letter")
    assert extract("option_letter", "D", ["yes", "no"]) == (None, UNPARSED)
    assert extract("option_letter", "D") == ("D", "letter")
    assert extract("option_letter", "E") == (None, UNPARSED)
    # an empty option never matches (upstream: '' is in every answer)
    assert extract("option_letter", "a rocket", ["", "rocket"]) == ("B", "option_text")


def test_can_infer_helpers_mirror_vlmevalkit() -> None:
    assert can_infer_option("The answer is C, I think", "ABCD").value == "C"
    assert can_infer_option("A B", "ABCD") is None
    assert can_infer_option("Q", "ABCD") is None
    assert can_infer_text("Coffee Cup!", OPTIONS, "ABCD").value == "C"
    assert can_infer_text("nothing", OPTIONS, "ABCD") is None


@pytest.mark.parametrize(
    ("text", "body", "prefix"),
    [
        ("The answer is B", "B", "answer_is+"),
        ("answer: 12", "12", "answer_is+"),
        ("First the answer is A. Final answer: C", "C", "answer_is+"),
        ("The answer is", "The answer is", ""),
        ("The answer isn't B", "The answer isn't B", ""),
        ("The answer is not B", "The answer is not B", ""),
        ("Hard to answer quickly", "Hard to answer quickly", ""),
    ],
)
def test_answer_part(text: str, body: str, prefix: str) -> None:
    assert answer_part(text) == (body, prefix)


@pytest.mark.parametrize(
    ("text", "value", "rule"),
    [
        ("Yes", "yes", "yes_no_single"),
        ("Yes.", "yes", "yes_no_single"),
        ("YES!", "yes", "yes_no_single"),
        ("no", "no", "yes_no_single"),
        ("Yes, there is.", "yes", "yes_no_single"),
        ("No, yes.", "no", "yes_no_first"),
        ("Ｙｅｓ", "yes", "yes_no_single"),
        ("Maybe.", None, UNPARSED),
        ("Nope", None, UNPARSED),
        ("", None, UNPARSED),
    ],
)
def test_generic_yes_no(text: str, value: str | None, rule: str) -> None:
    assert extract("yes_no", text) == (value, rule)


@pytest.mark.parametrize(
    ("text", "value", "rule"),
    [
        ("Yes", "yes", "mme_exact"),
        ("Yes.", "yes", "mme_exact"),
        ("  no. ", "no", "mme_exact"),
        ("Y", "yes", "mme_letter"),
        ("n", "no", "mme_letter"),
        ("x", None, UNPARSED),
        ("Yes, it is.", "yes", "mme_prefix"),
        ("No, there is not.", "no", "mme_prefix"),
        ("Nope", "no", "mme_prefix"),
        ("Not sure", "no", "mme_prefix"),  # upstream: 'no' within the first four characters
        ("I think yes", None, UNPARSED),  # upstream: only the first four characters count
        ("There is no dog", None, UNPARSED),
        ("", None, UNPARSED),
    ],
)
def test_mme_convention(text: str, value: str | None, rule: str) -> None:
    assert extract("yes_no_mme", text) == (value, rule)


@pytest.mark.parametrize(
    ("text", "value", "rule"),
    [
        ("Yes", "yes", "pope_default_yes"),
        ("No", "no", "pope_no_word"),
        ("No.", "no", "pope_no_word"),
        ("no, there is no dog.", "no", "pope_no_word"),
        ("There is not a dog in the image.", "no", "pope_no_word"),
        ("Yes. There is no cat.", "yes", "pope_default_yes"),  # only the first sentence counts
        ("I cannot tell.", "yes", "pope_default_yes"),  # upstream: anything else is yes
        ("NO", "yes", "pope_default_yes"),  # upstream is case-sensitive
        ("No!", "yes", "pope_default_yes"),
        ("There isn't a dog", "yes", "pope_default_yes"),
        ("  No  ", "no", "pope_no_word"),
        ("", None, UNPARSED),
        ("   \n", None, UNPARSED),
    ],
)
def test_pope_convention(text: str, value: str | None, rule: str) -> None:
    assert extract("yes_no_pope", text) == (value, rule)


@pytest.mark.parametrize(
    ("text", "value", "rule"),
    [
        ("42", "42", "number"),
        ("42.", "42", "number"),
        ("There are 3 cats.", "3", "number"),
        ("-3.5 degrees", "-3.5", "number"),
        ("\u22124", "-4", "number"),
        ("+7", "7", "number"),
        (".5 liters", "0.5", "number"),
        ("1,234", "1234", "number"),
        ("12,345,678 people", "12345678", "number"),
        ("1,2345", "1", "number"),  # not a thousands separator
        ("1, 2, 3", "1", "number"),
        ("The answer is 1,234.5%", "1234.5%", "answer_is+number"),
        ("50 %", "50%", "number"),
        ("about 12.5% of them", "12.5%", "number"),
        ("$1.45", "1.45", "number"),
        ("１２", "12", "number"),  # full-width digits
        ("H2O has 3 atoms", "3", "number"),
        ("version v1.2 and then 5", "5", "number"),
        ("I see 3 cats. The answer is 4.", "4", "answer_is+number"),
        ("The answer is four.", "4", "answer_is+number_word"),
        ("seven", "7", "number_word"),
        ("Twenty-one cats", "21", "number_word"),
        ("ninety nine", "99", "number_word"),
        ("fifteen", "15", "number_word"),
        ("I count 3. The answer is unknown.", "3", "number"),
        ("none here", None, UNPARSED),
        ("", None, UNPARSED),
    ],
)
def test_numbers(text: str, value: str | None, rule: str) -> None:
    assert extract("number", text) == (value, rule)


@pytest.mark.parametrize(
    ("name", "text", "value"),
    [
        ("first_word", "  Cat. It sleeps.", "Cat"),
        ("first_word", "The answer is: dog.", "dog"),
        ("first_word", "...", None),
        ("first_line", "\n  two words \nmore", "two words"),
        ("raw", "  as is \n", "as is"),
    ],
)
def test_text_extractors(name: str, text: str, value: str | None) -> None:
    assert extract(name, text)[0] == value


CHOICES = ["3/11", "8/11", "6/11", "3/5"]
MC = {"question_type": "multi_choice", "answer_type": "text", "choices": CHOICES, "precision": None}


@pytest.mark.parametrize(
    ("text", "value", "rule"),
    [
        ("8/11", "8/11", "choice_text"),
        ("B", "8/11", "letter"),
        ("(B) 8/11", "8/11", "letter"),
        ("The correct answer is (B) 8/11.", "8/11", "answer_is+letter"),
        ('The answer is "6/11".', "6/11", "quick_extract+choice_text"),
        ("(b)", "8/11", "paren_letter"),
        ("It is 3/5 of the shape", "3/5", "option_text"),
        ("I think it is about 8/12", "8/11", "closest_choice"),
        ("The answer is 8/12", "8/11", "answer_is+closest_choice"),
        ("Sorry, I can't help with images of people yet.", None, "refusal"),
        ("", None, UNPARSED),
        ("  ", None, UNPARSED),
    ],
)
def test_mathvista_multi_choice(text: str, value: str | None, rule: str) -> None:
    assert extract("mathvista", text, fields=MC) == (value, rule)


@pytest.mark.parametrize(
    ("answer_type", "precision", "text", "value", "rule"),
    [
        ("integer", None, "14", "14", "integer"),
        ("integer", None, "3.7", "3", "integer"),  # int(float(x)), as upstream
        ("integer", None, "The number missing is 14.", "14", "number+integer"),
        ("integer", None, "The answer is 1,024", "1024", "answer_is+number+integer"),
        ("integer", None, "seven", "7", "number_word+integer"),
        ("integer", None, "no idea", None, UNPARSED),
        ("float", 1.0, "0.6", "0.6", "float"),
        ("float", 2.0, "1.456", "1.46", "float"),
        ("float", 1.0, "about 12.5%", "12.5", "number+float"),
        ("float", 2.0, "Luca needs $1.45 to buy both.", "1.45", "number+float"),
        ("float", 0.0, "2.6", "3.0", "float"),
        ("list", None, "between [2007, 2008]", "[2007, 2008]", "list"),
        ("list", None, "2007 and 2008", None, UNPARSED),
    ],
)
def test_mathvista_free_form(
    answer_type: str, precision: float | None, text: str, value: str | None, rule: str
) -> None:
    fields = {"question_type": "free_form", "answer_type": answer_type, "choices": None, "precision": precision}
    assert extract("mathvista", text, fields=fields) == (value, rule)


def test_mathvista_bad_fields_fail_the_doc_not_the_run() -> None:
    with pytest.raises(DocError, match="question_type"):
        extract("mathvista", "1", fields={"answer_type": "integer"})
    with pytest.raises(DocError, match="precision"):
        extract("mathvista", "1.5", fields={"question_type": "free_form", "answer_type": "float"})
    with pytest.raises(DocError, match="choices"):
        extract("mathvista", "A", fields={"question_type": "multi_choice", "answer_type": "text"})
    with pytest.raises(DocError, match="no normalization"):
        extract("mathvista", "a cat", fields={"question_type": "free_form", "answer_type": "text"})


def test_mathvista_takes_the_task_options_when_the_doc_has_no_choices() -> None:
    fields = {"question_type": "multi_choice", "answer_type": "text"}
    assert extract("mathvista", "C", ["x", "y", "z"], fields) == ("z", "letter")


def test_closest_choice() -> None:
    assert get_most_similar("ab", ["xy", "ax", "ab"]) == "ab"
    assert get_most_similar("zz", ["ab", "cd"]) == "ab"  # ties: the first, as upstream
    assert normalize_extracted_answer("(c)", CHOICES, "multi_choice", "text", None).value == "6/11"
    assert normalize_extracted_answer("", CHOICES, "multi_choice", "text", None).rule == UNPARSED


def _load_lmms_eval_file(relative: str, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """One lmms-eval task file loaded by path (its package __init__ pulls in the whole harness);
    loguru is stubbed when lmms-eval was installed without its dependencies."""
    spec = importlib.util.find_spec("lmms_eval")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("lmms-eval is not installed")
    path = Path(spec.submodule_search_locations[0]) / relative
    if importlib.util.find_spec("loguru") is None:
        monkeypatch.setitem(sys.modules, "loguru", types.SimpleNamespace(logger=None))
    file_spec = importlib.util.spec_from_file_location("lmms_eval_reference", path)
    assert file_spec is not None and file_spec.loader is not None
    module = importlib.util.module_from_spec(file_spec)
    file_spec.loader.exec_module(module)
    return module


def test_mme_convention_matches_lmms_eval(monkeypatch: pytest.MonkeyPatch) -> None:
    reference = _load_lmms_eval_file("tasks/mme/utils.py", monkeypatch).parse_pred_ans
    texts = ["Yes", "yes.", "No", "no", "Y", "n", "q", "Yes, it is", "No, it is not", "Nope", "nothing", "I think yes",
             "There is a dog", "", "  YES  ", "no.", "Not really", "yes and no", "knob", "...", "Yes\nNo"]  # fmt: skip
    for text in texts:
        expected = reference(text)
        assert extract("yes_no_mme", text)[0] == (None if expected == "other" else expected), text
