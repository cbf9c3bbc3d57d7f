"""VQA accuracy, ANLS and ChartQA relaxed accuracy: the native edit distance against its Python
reference, and every metric against lmms-eval 0.7.3 on the same randomized and adversarial
inputs. Where we differ on purpose, the test pins the difference to exactly the documented one."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
from native_checks import releases_gil
from peer_lmms_eval import lmms_eval_module

from fastmmeval import _core
from fastmmeval.metrics import METRICS, summarize
from fastmmeval.metrics.edit_distance import (
    levenshtein_distance_reference,
    levenshtein_distances,
    levenshtein_similarities,
    levenshtein_similarity_reference,
)
from fastmmeval.metrics.vqa import (
    ANLS_THRESHOLD,
    ARTICLES,
    CONTRACTIONS,
    NUMBER_WORDS,
    PUNCTUATION,
    anls,
    anls_scores,
    normalize_anls_answer,
    normalize_evalai_answer,
    process_digit_article,
    process_punctuation,
    relaxed_accuracy,
    textvqa_accuracy,
    vizwiz_accuracy,
    vqa_accuracy,
)

# Pieces of answers that exercise every normalization rule, and unicode.
PIECES = [
    "yes", "no", "Yes", "No", "YES", "Yes.", "no.", "two", "Two", "three", "ten", "none", "zero", "a", "an", "The",
    "the", "dog", "dogs", "man's", "it's", "dont", "cant", "isnt", "Im", "Ive", "yall", "oclock", "red", "white",
    "coca-cola", "1,000", "1000", "1,,2", "3.5", "12", "3.", "e.g.", "...", "?", "!", "(", ")", "[x]", "'s", "ß",
    "İ", "café", "Ω", "中文", "😀", "\t", "\n", "  ", ",", ";", "/", "-", "_", "1,2,3", "12:30", "$5", ".", "@",
    "`", "<b>", "=", "+", "\\", '"', "{}", "10%", "", "\u00a0", "\u2003",
]  # fmt: skip


def random_text(rng: random.Random, max_pieces: int = 5) -> str:
    return "".join(rng.choice(PIECES) + rng.choice(["", " ", " ", "  "]) for _ in range(rng.randint(0, max_pieces)))


# --- the native edit distance ------------------------------------------------------------------

ALPHABETS = ["ab", "abc ", "aé中😀", "ab\ud800\udfff", "".join(map(chr, range(250, 270))), "xyz" + "".join(
    chr(c) for c in range(0x4E00, 0x4E00 + 90))]  # fmt: skip


def random_pairs(rng: random.Random, n: int) -> tuple[list[str], list[str]]:
    a, b = [], []
    for _ in range(n):
        alphabet = rng.choice(ALPHABETS)
        la, lb = (rng.choice([0, 1, 2, 5, 20, 63, 64, 65, 90, 130]) for _ in range(2))
        a.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, la))))
        b.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, lb))))
    return a, b


def test_native_levenshtein_matches_reference_on_unicode_of_every_width() -> None:
    a, b = random_pairs(random.Random(0), 3000)
    edges = [("", ""), ("", "abc"), ("kitten", "sitting"), ("😀", "😁"), ("ab" * 40, "ba" * 40), ("a" * 64, "a" * 65),
             ("x" + "中" * 70, "中" * 70 + "y"), ("\ud800", "\udfff"), ("ß", "SS")]  # fmt: skip
    a += [x for x, _ in edges]
    b += [y for _, y in edges]
    distances = levenshtein_distances(a, b)
    assert distances.dtype == np.int64
    assert distances.tolist() == [levenshtein_distance_reference(x, y) for x, y in zip(a, b, strict=True)]
    similarities = levenshtein_similarities(a, b)
    assert similarities.tolist() == [levenshtein_similarity_reference(x, y) for x, y in zip(a, b, strict=True)]
    assert levenshtein_distances(b, a).tolist() == distances.tolist()  # symmetric


def test_native_levenshtein_checks_its_arguments() -> None:
    assert levenshtein_distances([], []).tolist() == []
    assert levenshtein_similarities(("ab",), ("",)).tolist() == [0.0]
    with pytest.raises(ValueError, match="differ in length"):
        _core.levenshtein_distance(["a"], [])
    with pytest.raises(TypeError, match="str items"):
        _core.levenshtein_similarity(["a"], [b"a"])
    with pytest.raises(TypeError, match="not str"):
        _core.levenshtein_distance("ab", "ba")


def test_native_levenshtein_releases_the_gil() -> None:
    rng = random.Random(7)
    a = ["".join(rng.choice("abcdé中") for _ in range(300)) for _ in range(600)]
    b = ["".join(rng.choice("abcdé中") for _ in range(300)) for _ in range(600)]
    assert releases_gil(lambda: _core.levenshtein_distance(a, b))


# --- VQA accuracy ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def evalai():
    return lmms_eval_module("tasks._task_utils.vqa_eval_metric").EvalAIAnswerProcessor()


def test_normalization_tables_are_the_official_ones(evalai) -> None:
    assert evalai.CONTRACTIONS == CONTRACTIONS
    # lmms-eval's processor adds every word it reads to its (class-level) map as word -> word.
    assert {k: v for k, v in evalai.NUMBER_MAP.items() if k != v} == NUMBER_WORDS
    assert set(evalai.ARTICLES) == ARTICLES
    assert tuple(evalai.PUNCTUATIONS) == PUNCTUATION


def test_evalai_normalizer_equals_lmms_eval_on_random_and_adversarial_answers(evalai) -> None:
    rng = random.Random(1)
    texts = [random_text(rng) for _ in range(4000)] + PIECES + ["." * 40 + "x", "a" + "." * 40, "Yes."]
    for text in texts:
        assert normalize_evalai_answer(text) == evalai(text), repr(text)
        assert process_digit_article(text) == evalai.process_digit_article(text), repr(text)


def test_punctuation_differs_from_mmf_only_on_a_run_of_commas_between_digits(evalai) -> None:
    """lmms-eval (mmf) deletes marks when `(?<=\\d),+(?=\\d)` matches; the official rule is `(\\d)(,)(\\d)`."""
    rng = random.Random(2)
    differ = 0
    for text in [random_text(rng) for _ in range(4000)]:
        mmf_only = re.search(r"(?<=\d),+(?=\d)", text) and not re.search(r"\d,\d", text)
        if process_punctuation(text) != evalai.process_punctuation(text):
            assert mmf_only, repr(text)
            differ += 1
    assert differ > 0
    assert process_punctuation("a-b 1,,2") == "a b 1  2"
    assert evalai.process_punctuation("a-b 1,,2") == "ab 12"


def annotator_answers(rng: random.Random) -> list[str]:
    pool = [random_text(rng, 3) for _ in range(rng.randint(1, 4))]
    return [rng.choice(pool) for _ in range(10)]


def prediction_for(rng: random.Random, answers: list[str]) -> str:
    base = rng.choice(answers) if rng.random() < 0.7 else random_text(rng, 3)
    return rng.choice([base, base.upper(), base + ".", "The " + base, " " + base + " ", base + "?", base.title()])


def same(ours: float, peer: float) -> bool:
    """Equal up to the last bits: lmms-eval averages the ten subsets with statistics.mean (exact),
    the official scripts (and we) with sum / len in floating point."""
    return abs(ours - peer) <= 1e-12


def lmms_vqav2(module, prediction: str, answers: list[str]) -> float:
    doc = {"question_id": 1, "answers": [{"answer": a, "answer_id": i + 1} for i, a in enumerate(answers)]}
    return module.vqav2_process_results(doc, [prediction])["exact_match"]


def test_textvqa_accuracy_equals_lmms_eval_textvqa_okvqa_and_vizwiz() -> None:
    modules = [lmms_eval_module(f"tasks.{t}.utils") for t in ("textvqa", "ok_vqa", "vizwiz_vqa")]
    hooks = [modules[0].textvqa_process_results, modules[1].ok_vqa_process_results,
             modules[2].vizwiz_vqa_process_results]  # fmt: skip
    rng = random.Random(3)
    scores = []
    for i in range(3000):
        answers = annotator_answers(rng)
        prediction = prediction_for(rng, answers)
        ours = textvqa_accuracy(prediction, answers, {})
        peer = hooks[i % 3]({"question_id": i, "answers": list(answers)}, [prediction])["exact_match"]
        assert same(ours, peer), (prediction, answers)
        scores.append(ours)
    assert len(set(scores)) >= 4  # 0, 0.3, 0.6, 0.9 and 1.0 all occur


def test_vqa_accuracy_differs_from_lmms_eval_vqav2_only_in_how_answers_are_normalized() -> None:
    """lmms-eval normalizes every stored answer; the official script uses them as stored (they are
    stored normalized) and only processes punctuation when they disagree."""
    module = lmms_eval_module("tasks.vqav2.utils")
    rng = random.Random(4)
    differ = 0
    for _ in range(3000):
        answers = annotator_answers(rng)
        prediction = prediction_for(rng, answers)
        if re.search(r"\d,,", prediction + "".join(answers)):
            continue  # the comma rule, pinned in test_punctuation_differs_from_mmf_only_...
        peer = lmms_vqav2(module, prediction, answers)
        stored = [process_digit_article(process_punctuation(a.replace("\n", " ").replace("\t", " ").strip()))
                  for a in answers]  # fmt: skip
        assert same(vqa_accuracy(prediction, stored, {}), peer), (prediction, answers)
        if all(a == s for a, s in zip(answers, stored, strict=True)):
            assert same(vqa_accuracy(prediction, answers, {}), peer)
        differ += not same(vqa_accuracy(prediction, answers, {}), peer)
    assert differ > 0
    assert vqa_accuracy("2", ["Two"] * 10, {}) == 0.0  # the official script compares with "Two" as stored
    assert lmms_vqav2(module, "2", ["Two"] * 10) == 1.0


def test_vqa_accuracy_follows_the_official_script() -> None:
    ten = ["yes"] * 10
    assert vqa_accuracy("Yes.", ten, {}) == 1.0
    assert vqa_accuracy("yes", ["yes"] * 2 + ["no"] * 8, {}) == pytest.approx(0.6)  # 8/10 * 2/3 + 2/10 * 1/3
    assert vqa_accuracy("two dogs", ["2 dogs"] * 3 + ["dogs"] * 7, {}) == pytest.approx(0.9)
    assert vqa_accuracy("1,000", ["1000", "1 000"] * 5, {}) == pytest.approx(1.0)
    assert vqa_accuracy("dont know", ["don't know"] * 10, {}) == 1.0
    assert vqa_accuracy("", ["", "x"] * 5, {}) == 1.0
    assert vqa_accuracy(None, ten, {}) == 0.0
    assert vqa_accuracy("yes", [], {}) == 0.0
    assert vqa_accuracy("a" + "." * 40, ["a" + "." * 8] * 10, {}) == 1.0  # only 32 periods go
    # VizWiz: the answers as stored; TextVQA: both sides through the EvalAI processor.
    assert vizwiz_accuracy("coca cola", ["coca-cola"] * 10, {}) == 0.0
    assert vqa_accuracy("coca cola", ["coca-cola", "coke"] * 5, {}) == 1.0
    assert textvqa_accuracy("Man's hat", ["man's hat"] * 10, {}) == 1.0
    assert vqa_accuracy("Man's hat", ["man's hat"] * 10, {}) == 1.0


# --- ANLS --------------------------------------------------------------------------------------

ANLS_WORDS = ["Denver", "Broncos", "12/15/89", "Dr.", "Lobo", "$1,234.00", "ß-straße", "İstanbul", "北京", "ﬁnal", "😀"]


def anls_case(rng: random.Random) -> tuple[str, list[str]]:
    refs = [" ".join(rng.choice(ANLS_WORDS) for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(1, 3))]
    pred = rng.choice(refs)
    chars = list(pred)
    for _ in range(rng.randint(0, 4)):  # typos
        if chars:
            chars[rng.randrange(len(chars))] = rng.choice("aeo1 ")
    pred = "".join(chars)
    pred = rng.choice([pred, pred.upper(), pred.lower(), f"  {pred}  ", pred.replace(" ", "   "), "", "no idea"])
    if rng.random() < 0.2:
        refs[0] = " " + refs[0] + "\t"
    return pred, refs


def test_anls_equals_the_python_reference_and_lmms_eval_up_to_its_raw_length_bug() -> None:
    peer_anls = lmms_eval_module("api.metrics").anls
    rng = random.Random(5)
    cases = [anls_case(rng) for _ in range(3000)] + [("", [""]), ("  ", [""]), ("ß", ["ss"]), ("x", ["X "])]
    ours = anls_scores([p for p, _ in cases], [r for _, r in cases])
    differ = 0
    for (pred, refs), score in zip(cases, ours, strict=True):
        p = normalize_anls_answer(pred)
        sims = [levenshtein_similarity_reference(p, normalize_anls_answer(r)) for r in refs]
        assert score == (max(sims) if max(sims) >= ANLS_THRESHOLD else 0.0)
        assert anls(pred, refs, {}) == score
        # lmms-eval: the same distances over the raw lengths of the upper-cased strings.
        distances = [levenshtein_distance_reference(p, normalize_anls_answer(r)) for r in refs]
        raw = [1 - d / max(len(r.upper()), len(pred.upper()), 1) for d, r in zip(distances, refs, strict=True)]
        expected_peer = max(raw) if max(raw) >= ANLS_THRESHOLD else 0.0
        assert peer_anls(refs, [pred])["anls"] == expected_peer, (pred, refs)
        differ += expected_peer != score
    assert differ > 0
    assert anls("  hello   world ", ["Hello World"], {}) == 1.0
    assert anls("abcd", ["abce"], {}) == 0.75
    assert anls("ab", ["cd"], {}) == 0.0
    assert anls(None, ["x"], {}) == 0.0
    assert anls("x", [], {}) == 0.0
    assert peer_anls(["  hellp   world "], ["hello world"])["anls"] > anls("hello world", ["  hellp   world "], {})


# --- ChartQA relaxed accuracy ------------------------------------------------------------------

CHART_VALUES = ["12", "12.0", "12.5", "12%", "0.12", "11.5", "12.6", "12.61", "-3", "0", "0.0", "-0", "1,234", "1234",
                "1_234", "1e3", "inf", "nan", "NaN", "Infinity", "１２", " 12 ", "12 ", "12.", "12%%", "%", "",
                "Yes", "yes", "Yes.", "A", "a", "ß", "SS", "0%", "5%", "-5%", "1.05", "1", "0.95",
                "0.9499"]  # fmt: skip


def test_relaxed_accuracy_equals_lmms_eval_chartqa() -> None:
    peer = lmms_eval_module("tasks.chartqa.utils").relaxed_correctness
    rng = random.Random(6)
    pairs = [(p, t) for p in CHART_VALUES for t in CHART_VALUES]
    pairs += [(f"{rng.uniform(-1e3, 1e3):.{rng.randint(0, 4)}f}", f"{rng.uniform(-1e3, 1e3):.2f}") for _ in range(2000)]
    base = [rng.uniform(-100, 100) for _ in range(2000)]
    pairs += [(repr(b * rng.uniform(0.94, 1.06)), repr(b)) for b in base]
    for prediction, target in pairs:
        assert relaxed_accuracy(prediction, [target], {}) == float(peer(prediction, target)), (prediction, target)
    assert relaxed_accuracy("12%", ["0.12"], {}) == 1.0
    assert relaxed_accuracy("104", ["100"], {}) == 1.0
    assert relaxed_accuracy("106", ["100"], {}) == 0.0
    assert relaxed_accuracy("Yes", ["yes", "no"], {}) == 1.0
    assert relaxed_accuracy(None, ["1"], {}) == 0.0


# --- registration ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["vqa_accuracy", "textvqa_accuracy", "vizwiz_accuracy", "anls", "relaxed_accuracy"])
def test_metrics_are_registered_means_with_analytic_stderr(name: str) -> None:
    metric = METRICS.get(name)
    assert metric.stderr == "analytic"
    items = [metric.score("yes", ["yes"] * 10, {}), metric.score("no", ["yes"] * 10, {})]
    assert items == [1.0, 0.0]
    assert summarize(metric, items)[name]["value"] == 0.5
