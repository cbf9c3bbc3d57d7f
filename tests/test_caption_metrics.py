"""Captioning metrics: native path, pure-Python reference and pycocoevalcap 1.2 on the same
pre-tokenized captions (randomized and adversarial), the registered metrics, and the Java-only
parts (PTBTokenizer, METEOR) when `java` is on PATH."""

from __future__ import annotations

import random
import shutil

import numpy as np
import pytest

from fastmmeval import _core
from fastmmeval.errors import ConfigError, DocError
from fastmmeval.metrics import METRICS, summarize
from fastmmeval.metrics import caption as C

pytest.importorskip("pycocoevalcap", reason="pycocoevalcap 1.2 (the `test` extra) is the peer")
from pycocoevalcap.bleu.bleu import Bleu  # noqa: E402
from pycocoevalcap.cider.cider import Cider  # noqa: E402
from pycocoevalcap.rouge.rouge import Rouge  # noqa: E402

TOL = 1e-9
JAVA = shutil.which("java")
NO_JAVA = "needs Java (`java` on PATH) for pycocoevalcap's jars: apt-get install default-jre-headless"

WORDS = [f"w{i}" for i in range(40)] + ["a", "the", "dog", "café", "東京", "naïve", "straße", "😀", "-lrb-", "x'y", "İ"]


def random_corpus(seed: int, n: int) -> tuple[list[str], list[list[str]]]:
    """Random pre-tokenized candidates and references with the awkward cases mixed in."""
    rng = random.Random(seed)

    def caption(lo: int = 1, hi: int = 18) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))

    preds, refs = [], []
    for _ in range(n):
        rs = [caption() for _ in range(rng.choice([1, 1, 2, 3, 5, 5, 5, 10]))]
        kind = rng.random()
        if kind < 0.05:
            pred = ""
        elif kind < 0.12:
            pred = rng.choice(rs)  # identical to a reference
        elif kind < 0.18:
            pred = rng.choice(WORDS)  # one word
        elif kind < 0.24:
            pred = " ".join([rng.choice(WORDS)] * rng.randint(2, 30))  # one word repeated
        elif kind < 0.27:
            pred = caption(150, 400)  # very long
        else:
            pred = caption()
        if rng.random() < 0.03:
            rs[rng.randrange(len(rs))] = ""  # an empty reference
        if rng.random() < 0.05:
            rs = [rng.choice(WORDS)] * len(rs)  # one-word references
        preds.append(pred)
        refs.append(rs)
    return preds, refs


def peer_scores(preds: list[str], refs: list[list[str]]) -> dict[str, object]:
    """pycocoevalcap's corpus and per-image CIDEr-D, BLEU 1-4 and ROUGE-L."""
    gts = {i: list(rs) for i, rs in enumerate(refs)}
    res = {i: [p] for i, p in enumerate(preds)}
    cider, cider_per_image = Cider().compute_score(gts, res)
    bleu, bleu_per_image = Bleu(4).compute_score(gts, res, verbose=0)
    rouge, rouge_per_image = Rouge().compute_score(gts, res)
    return {
        "cider": (cider, np.asarray(cider_per_image)),
        "bleu": (np.asarray(bleu), np.asarray(bleu_per_image).T),
        "rouge_l": (rouge, np.asarray(rouge_per_image)),
    }


@pytest.fixture(scope="module")
def corpus() -> tuple[list[str], list[list[str]], dict[str, object]]:
    preds, refs = random_corpus(seed=0, n=2500)
    return preds, refs, peer_scores(preds, refs)


def close(a: object, b: object) -> bool:
    return bool(np.max(np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float)), initial=0.0) <= TOL)


@pytest.mark.parametrize("impl", ["native", "reference"])
def test_cider_d_equals_pycocoevalcap(corpus, impl: str) -> None:
    preds, refs, peer = corpus
    score, per_image = (C.cider_d if impl == "native" else C.cider_d_reference)(preds, refs)
    assert close(score, peer["cider"][0]) and close(per_image, peer["cider"][1])
    assert peer["cider"][0] > 0.1  # not a trivially empty comparison


@pytest.mark.parametrize("impl", ["native", "reference"])
def test_bleu_corpus_and_per_image_equal_pycocoevalcap(corpus, impl: str) -> None:
    preds, refs, peer = corpus
    score, per_image = (C.bleu if impl == "native" else C.bleu_reference)(preds, refs)
    assert close(score, peer["bleu"][0]) and close(per_image, peer["bleu"][1])


@pytest.mark.parametrize("impl", ["native", "reference"])
def test_rouge_l_equals_pycocoevalcap(corpus, impl: str) -> None:
    preds, refs, peer = corpus
    score, per_image = (C.rouge_l if impl == "native" else C.rouge_l_reference)(preds, refs)
    assert close(score, peer["rouge_l"][0]) and close(per_image, peer["rouge_l"][1])


@pytest.mark.parametrize(
    ("preds", "refs"),
    [
        (["a dog"], [["a dog", "the cat"]]),  # one image: log(1) = 0, CIDEr-D 0
        (["", "x"], [["x", ""], ["x"]]),  # empty against empty: ROUGE-L 1 as in pycocoevalcap
        (["a a a a", "a"], [["a"], ["a a a a"]]),
        (["w", "w w", "w w w"], [["w w w w w w w w"], ["w"], ["w w"]]),
    ],
)
def test_adversarial_small_corpora(preds: list[str], refs: list[list[str]]) -> None:
    peer = peer_scores(preds, refs)
    implementations = {
        "cider": (C.cider_d, C.cider_d_reference),
        "bleu": (C.bleu, C.bleu_reference),
        "rouge_l": (C.rouge_l, C.rouge_l_reference),
    }
    for name, impls in implementations.items():
        for impl in impls:
            score, per_image = impl(preds, refs)
            assert close(score, peer[name][0]) and close(per_image, peer[name][1]), (name, impl)


def test_references_without_words() -> None:
    """pycocoevalcap's CIDEr fails (max() of no document frequencies); ours scores 0."""
    assert C.cider_d([""], [[""]]) == (0.0, pytest.approx([0.0]))
    assert C.cider_d_reference(["a"], [["", ""]]) == (0.0, [0.0])
    peer_bleu, _ = Bleu(4).compute_score({0: [""]}, {0: [""]}, verbose=0)  # BLEU and ROUGE-L are defined there
    assert close(C.bleu([""], [[""]])[0], peer_bleu)
    assert C.rouge_l([""], [[""]])[0] == Rouge().compute_score({0: [""]}, {0: [""]})[0] == 1.0


def test_a_selection_is_scored_as_its_own_corpus(corpus) -> None:
    """Bootstrap draws (repeats included) equal pycocoevalcap on the drawn images as distinct ids."""
    preds, refs, _ = corpus
    scorer = C.CaptionScorer(preds[:300], refs[:300])
    draw = np.random.default_rng(1).integers(0, 300, size=300)
    peer = peer_scores([preds[j] for j in draw], [refs[j] for j in draw])
    assert close(scorer.cider_d(draw), peer["cider"][1])
    bleu, bleu_per_image = scorer.bleu(draw)
    assert close(bleu, peer["bleu"][0]) and close(bleu_per_image, peer["bleu"][1])
    assert close(scorer.rouge_l(draw), peer["rouge_l"][1])


def test_registered_metrics_and_bootstrap(corpus) -> None:
    preds, refs, _ = corpus
    values = {}
    for name in ["cider", "bleu_1", "bleu_4", "rouge_l"]:
        metric = METRICS.get(name)
        items = [metric.score(p, r, {}) for p, r in zip(preds[:400], refs[:400], strict=True)]
        values[name] = summarize(metric, items, bootstrap_iters=50)[name]
        assert values[name]["stderr"] is not None and 0 < values[name]["stderr"] < 0.2
    tokenized = [C.tokenize(p) for p in preds[:400]], [[C.tokenize(r) for r in rs] for rs in refs[:400]]
    assert values["cider"]["value"] == C.cider_d(*tokenized)[0]
    assert values["bleu_4"]["value"] == C.bleu(*tokenized)[0][3]
    assert values["rouge_l"]["value"] == pytest.approx(C.rouge_l(*tokenized)[0], abs=TOL)
    assert METRICS.get("cider").to_100(1.3) == 100.0 and METRICS.get("cider").to_100(0.5) == 50.0
    assert METRICS.get("bleu_4").score(None, ["a dog"], {}) == {"pred": "", "refs": ["a dog"]}
    with pytest.raises(DocError, match="at least one reference"):
        METRICS.get("cider").score("a dog", [], {})


def test_native_rejects_malformed_buffers() -> None:
    tokens = np.array([0, 1, 2], dtype=np.uint32)
    with pytest.raises(ValueError, match="at least one reference"):
        _core.CaptionNgrams(tokens, np.array([0, 2], dtype=np.int64), np.array([0, 1], dtype=np.int64))
    with pytest.raises(ValueError, match="non-decreasing"):
        _core.CaptionNgrams(tokens, np.array([0, 2, 1], dtype=np.int64), np.array([0], dtype=np.int64))
    with pytest.raises(ValueError, match="past the end"):
        _core.caption_rouge_l(tokens, np.array([0, 5], dtype=np.int64), np.array([0], dtype=np.int64))
    grams = _core.CaptionNgrams(tokens, np.array([0, 2], dtype=np.int64), np.array([0], dtype=np.int64))
    with pytest.raises(ValueError, match=r"images\[0\]=1 is not in \[0, 1\)"):
        grams.cider(np.array([1], dtype=np.int64))


TOKENIZE_CASES = {
    "A man riding a wave on top of a surfboard.": "a man riding a wave on top of a surfboard",
    "The man's hat isn't red; it's \"blue\" (mostly).": "the man 's hat is n't red it 's blue -lrb- mostly -rrb-",
    "A black-and-white photo of a 1,000 year old building in the U.S. at 3:30 p.m.":
        "a black-and-white photo of a 1,000 year old building in the u.s. at 3:30 p.m.",
    "He can't, won't -- I cannot... 'Tis 10:30am!": "he ca n't wo n't i can not 't is 10:30 am",
    "Wow!! Really?! A $5 sign, 50% off & more [sic] {x}":
        "wow !! really ?! a $ 5 sign 50 % off & more -lsb- sic -rsb- -lcb- x -rcb-",
    "Café “naïve” — 東京 😀 dogs' toys. Mr. Smith, e.g. St. Louis":
        "café naïve 東京 dogs toys mr. smith e.g. st. louis",
}  # fmt: skip


def test_tokenize_pinned_cases() -> None:
    for text, expected in TOKENIZE_CASES.items():
        assert C.tokenize(text) == expected, text


REALISTIC = [
    "A group of people standing around a kitchen.",
    "The image shows a man riding a horse on the beach. The sky is blue, and there are clouds.",
    "A close-up of a pizza with pepperoni, mushrooms and olives.",
    "Is that a dog? Yes, it's a brown dog sitting on a couch.",
    "A woman's hand holding a smartphone (an iPhone) near a window.",
    "An old black-and-white photo of a street in the 1950's.",
    "A plate of food: rice, beans; and a salad...",
    "There are 3 people and 2 dogs at the park at 5:30 p.m.",
    "A baseball player swings his bat at the ball -- and misses.",
    "Someone's laptop on a desk next to a cup of coffee & a notebook",
    "The photo shows:   a dog,  a ball and   a frisbee.",
    '"A lovely day," she said.',
    "A man in a suit standing in front of a building; his name is Dr. John Doe Jr.",
    "The clock reads 10:10 and the temperature is 72°F.",
    'The sign reads: "Welcome to Joe\'s Diner - Open 24/7".',
    "The boys are going to play; they're excited, aren't they?",
    "A skateboarder does a trick on a ramp [blurry photo].",
    "Wow! What a beautiful sunset over the ocean!!",
] + list(TOKENIZE_CASES)


@pytest.mark.skipif(JAVA is None, reason=f"PTBTokenizer comparison {NO_JAVA}")
def test_tokenize_matches_ptbtokenizer() -> None:
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    ptb = PTBTokenizer().tokenize({i: [{"caption": text}] for i, text in enumerate(REALISTIC)})
    assert [C.tokenize(text) for text in REALISTIC] == [ptb[i][0] for i in range(len(REALISTIC))]


@pytest.mark.skipif(JAVA is None, reason=f"METEOR {NO_JAVA}")
def test_meteor_runs_pycocoevalcaps_jar() -> None:
    """Values from pycocoevalcap's Meteor().compute_score on the same input (one JVM start is ~10 s,
    so the peer is not started a second time here)."""
    preds, refs = ["", "a cat", "café 東京"], [["a dog runs", "the dog"], ["a cat"], [""]]
    assert C.meteor(preds, refs) == (pytest.approx(0.35398230088495575, abs=TOL), [0.0, 1.0, 0.0])
    metric = METRICS.get("meteor")
    items = [metric.score(p, r, {}) for p, r in zip(preds, refs, strict=True)]
    assert summarize(metric, items)["meteor"] == {"value": pytest.approx(0.35398230088495575, abs=TOL), "stderr": None}


def test_meteor_without_java_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(C.shutil, "which", lambda name: None)
    metric = METRICS.get("meteor")
    with pytest.raises(ConfigError, match="needs Java"):
        metric.score("a dog", ["a dog"], {})
    with pytest.raises(ConfigError, match="needs Java"):
        metric.aggregate([{"pred": "a dog", "refs": ["a dog"]}])


def test_a_caption_run_without_java_stops_before_any_model_time(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from fastmmeval.cli import main

    monkeypatch.setattr(C.shutil, "which", lambda name: None)
    assert main(["run", "--model", "socratic", "--tasks", "coco2017_cap_val", "--output_path", "/nonexistent"]) == 1
    assert "task coco2017_cap_val: metric coco_METEOR cannot run here: METEOR" in capsys.readouterr().err
