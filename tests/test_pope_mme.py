"""POPE and MME against lmms-eval 0.7.3 on the same randomized and adversarial runs. Where we
differ on purpose (answer reading, POPE's yes ratio), the test pins the difference to exactly
the documented one."""

from __future__ import annotations

import random

import pytest
from peer_lmms_eval import lmms_eval_module

from fastmmeval.errors import DocError
from fastmmeval.metrics import METRICS, summarize
from fastmmeval.tasks.families.mme import COGNITION, PERCEPTION, mme_aggregate, mme_answer, mme_score
from fastmmeval.tasks.families.pope import pope_aggregate, pope_answer, pope_score

ANSWERS = [
    "yes", "no", "Yes", "No", "YES", "NO", "Yes.", "No.", "yes,", "No, there is no dog.", "Yes, there is a dog.",
    "There is no dog.", "There is not a dog", "I do not know", "not sure", "Not sure", "maybe", "", " ", " yes",
    "  no", "\nYes", "yes\n", "y", "n", "Y", "N", "y.", "...yes", ".no", "n.o", "ye.s", "nope", "none", "know",
    "Yes. No.", "No. Yes.", "yeah", "is it? yes", "The answer is yes", "Ja", "是", "nö", "noted", "yes!", "YES!!",
    "no\tway", "no-one", "No\nThere is a dog",
]  # fmt: skip
METRIC_KEYS = ("accuracy", "precision", "recall", "f1_score")


# --- POPE --------------------------------------------------------------------------------------


def test_pope_reads_answers_as_the_official_script() -> None:
    expected = {"Yes.": "yes", "No, there is no dog.": "no", "There is not a dog": "no", "NO": "yes", "Not sure": "yes",
                "": "yes", "maybe": "yes", "Yes. No.": "yes", "No. Yes.": "no", "yes, no": "no", "no\tway": "yes",
                "No\nThere is a dog": "yes", "I do not know": "no"}  # fmt: skip
    assert {text: pope_answer(text) for text in expected} == expected


@pytest.fixture(scope="module")
def pope_peer():
    return lmms_eval_module("tasks.pope.utils")


def lmms_pope(module, answers: list[str], labels: list[str]) -> dict[str, float]:
    results = [module.pope_process_results({"question_id": i, "answer": label}, [answer])["pope_accuracy"]
               for i, (answer, label) in enumerate(zip(answers, labels, strict=True))]  # fmt: skip
    return {key: getattr(module, f"pope_aggregate_{key}")(results) for key in (*METRIC_KEYS, "yes_ratio")}


def pope_run(rng: random.Random, n: int, answers: list[str]) -> tuple[list[str], list[str]]:
    return [rng.choice(answers) for _ in range(n)], [rng.choice(["yes", "no", "Yes", " no "]) for _ in range(n)]


def test_pope_equals_lmms_eval_on_clean_answers_except_yes_ratio_of_labels(pope_peer) -> None:
    rng = random.Random(0)
    for n in [1, 2, 5, 50, 500]:
        for _ in range(20):
            answers, labels = pope_run(rng, n, ["yes", "no", "Yes", "No"])
            ours = pope_aggregate([pope_score(a, [t], {}) for a, t in zip(answers, labels, strict=True)])
            peer = lmms_pope(pope_peer, answers, labels)
            assert {k: ours[k] for k in METRIC_KEYS} == {k: peer[k] for k in METRIC_KEYS}
            assert ours["yes_ratio"] == sum(a.lower() == "yes" for a in answers) / n
            # lmms-eval's yes ratio is our yes ratio of a model that answers the labels.
            assert peer["yes_ratio"] == pope_aggregate([pope_score(t, [t], {}) for t in labels])["yes_ratio"]


def test_pope_differs_from_lmms_eval_on_free_answers_only_by_the_official_reading(pope_peer) -> None:
    rng = random.Random(1)
    differ = 0
    for _ in range(100):
        answers, labels = pope_run(rng, 60, ANSWERS)
        ours = pope_aggregate([pope_score(a, [t], {}) for a, t in zip(answers, labels, strict=True)])
        read = lmms_pope(pope_peer, [pope_answer(a) for a in answers], labels)
        assert {k: ours[k] for k in METRIC_KEYS} == {k: read[k] for k in METRIC_KEYS}
        raw = lmms_pope(pope_peer, answers, labels)
        differ += raw["accuracy"] != ours["accuracy"]
    assert differ > 0


def test_pope_unparsed_answers_are_wrong_and_never_yes() -> None:
    items = [pope_score(None, ["yes"], {}), pope_score(None, ["no"], {}), pope_score("yes", ["yes"], {}),
             pope_score("Yes.", ["no"], {})]  # fmt: skip
    assert items[0] == {"prediction": "other", "label": "yes"}
    assert pope_aggregate(items) == {"accuracy": 0.25, "precision": 0.5, "recall": 0.5, "f1_score": 0.5,
                                     "yes_ratio": 0.5}  # fmt: skip
    with pytest.raises(DocError, match="yes or no"):
        pope_score("yes", ["maybe"], {})


def test_pope_is_registered_with_lmms_eval_key_names_and_bootstrap_stderr() -> None:
    metric = METRICS.get("pope")
    assert metric.stderr == "bootstrap" and metric.headline == "f1_score"
    rng = random.Random(2)
    answers, labels = pope_run(rng, 40, ANSWERS)
    items = [metric.score(a, [t], {}) for a, t in zip(answers, labels, strict=True)]
    summary = summarize(metric, items, bootstrap_iters=50)
    assert set(summary) == {"pope_accuracy", "pope_precision", "pope_recall", "pope_f1_score", "pope_yes_ratio"}
    assert all(v["stderr"] is not None and v["stderr"] > 0 for v in summary.values())


# --- MME ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mme_peer():
    return lmms_eval_module("tasks.mme.utils")


def test_mme_reading_differs_from_lmms_eval_only_by_periods_and_lone_y_n(mme_peer) -> None:
    """lmms-eval (Otter's parser) strips, deletes every '.', and reads a lone "y" / "n" as yes / no."""
    rng = random.Random(3)
    texts = ANSWERS + ["".join(rng.choice(ANSWERS) for _ in range(rng.randint(1, 3))) for _ in range(3000)]
    for text in texts:
        otter = text.lower().strip().replace(".", "")
        peer = mme_peer.parse_pred_ans(text)
        if otter in ("y", "n"):
            assert (peer, mme_answer(otter)) == ({"y": "yes", "n": "no"}[otter], "other")
        else:
            assert peer == mme_answer(otter), repr(text)
    assert mme_answer("...yes") == "other" and mme_peer.parse_pred_ans("...yes") == "yes"


def mme_run(rng: random.Random, images_per_category: int, answers: list[str]) -> list[dict]:
    docs = []
    for category in PERCEPTION + COGNITION:
        for k in range(images_per_category):
            for label in ("Yes", "No"):
                docs.append({"category": category, "question_id": f"{category}/{k}.png", "answer": label,
                             "prediction": rng.choice(answers)})  # fmt: skip
    rng.shuffle(docs)
    return docs


def lmms_mme(module, docs: list[dict], predictions: list[str]) -> dict[str, float]:
    grouped: dict[str, list] = {}
    for doc, prediction in zip(docs, predictions, strict=True):
        for key, value in module.mme_process_results(doc, [prediction]).items():
            grouped.setdefault(key, []).append(value)
    return {key: module.mme_aggregate_results(results) for key, results in grouped.items()}


def test_mme_totals_equal_lmms_eval_on_the_same_readings(mme_peer) -> None:
    rng = random.Random(4)
    for images in [1, 3, 20]:
        for answers in (["Yes", "No", "yes", "no."], ANSWERS):
            docs = mme_run(rng, images, answers)
            ours = mme_aggregate([mme_score(d["prediction"], [d["answer"]], d) for d in docs])
            # Give lmms-eval the answers as the official tool reads them: then the totals agree.
            read = [mme_answer(d["prediction"].strip()) for d in docs]
            peer = lmms_mme(mme_peer, docs, read)
            assert ours["perception_score"] == pytest.approx(peer["mme_perception_score"], abs=1e-9)
            assert ours["cognition_score"] == pytest.approx(peer["mme_cognition_score"], abs=1e-9)
            assert ours["perception_score"] == pytest.approx(sum(ours[f"{c}_score"] for c in PERCEPTION), abs=1e-9)


def test_mme_acc_and_acc_plus_of_a_small_run() -> None:
    def doc(category: str, image: str, answer: str, prediction: str | None) -> dict:
        return mme_score(prediction, [answer], {"category": category, "question_id": image})

    items = [doc("existence", "a.png", "Yes", "Yes"), doc("existence", "a.png", "No", "No"),
             doc("existence", "b.png", "Yes", "Yes"), doc("existence", "b.png", "No", "yes"),
             doc("code_reasoning", "c.png", "No", None), doc("code_reasoning", "c.png", "Yes", "y")]  # fmt: skip
    out = mme_aggregate(items)
    assert out["existence_acc"] == 75.0 and out["existence_acc_plus"] == 50.0 and out["existence_score"] == 125.0
    assert out["code_reasoning_score"] == 0.0
    assert out["perception_score"] == 125.0 and out["cognition_score"] == 0.0
    assert "cognition_score" not in mme_aggregate(items[:4])
    unknown = mme_aggregate([doc("mystery", "m.png", "Yes", "yes")])
    assert unknown == {"mystery_acc": 100.0, "mystery_acc_plus": 100.0, "mystery_score": 200.0}


def test_mme_reads_standard_field_names_and_names_what_is_missing() -> None:
    assert mme_score("yes", ["yes"], {"subtask": "OCR", "image_id": 7})["image"] == "7"
    with pytest.raises(DocError, match="category"):
        mme_score("yes", ["yes"], {"question_id": "x.png"})
    with pytest.raises(DocError, match="image id"):
        mme_score("yes", ["yes"], {"category": "OCR"})
    with pytest.raises(DocError, match="yes or no"):
        mme_score("yes", ["perhaps"], {"category": "OCR", "question_id": "x.png"})


def test_mme_is_registered_with_lmms_eval_key_names_and_bootstrap_stderr() -> None:
    metric = METRICS.get("mme")
    assert metric.stderr == "bootstrap" and metric.headline == "perception_score" and metric.cluster == "image"
    assert metric.to_100 is not None and metric.to_100(2000.0) == 100.0
    docs = mme_run(random.Random(5), 5, ANSWERS)
    items = [metric.score(d["prediction"], [d["answer"]], d) for d in docs]
    summary = summarize(metric, items, bootstrap_iters=30)
    assert {"mme_perception_score", "mme_cognition_score", "mme_OCR_acc_plus"} <= set(summary)
    assert summary["mme_perception_score"]["stderr"] > 0
