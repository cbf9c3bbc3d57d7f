"""MMBench CircularEval, the cluster bootstrap, and the cross-benchmark overall score."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any, ClassVar

import pytest

from fastmmeval.errors import DocError
from fastmmeval.evaluate import RunConfig, evaluate
from fastmmeval.metrics import METRICS, Metric, overall_score, summarize
from fastmmeval.metrics.circular import circular_accuracy, circular_group
from fastmmeval.models import MODELS, Model
from fastmmeval.protocol import Request, Response

CIRCULAR = METRICS.get("circular_accuracy")


def item(index: int, correct: bool) -> dict[str, Any]:
    return CIRCULAR.score("B" if correct else "C", ["B"], {"index": index})


@pytest.mark.parametrize(
    ("fields", "group"),
    [
        ({"index": 7}, 7),
        ({"index": 3_000_007}, 7),
        ({"index": 1_000_000}, 0),
        ({"index": "2000012"}, 12),
        ({"index": 5.0}, 5),
        ({"index": 3_000_007, "circular_group": "q7"}, "q7"),
        ({"circular_group": 42}, "42"),
    ],
)
def test_rotations_share_the_group_of_their_question(fields: dict[str, Any], group: int | str) -> None:
    assert circular_group(fields) == group


@pytest.mark.parametrize("fields", [{}, {"index": None}, {"index": "q1"}, {"index": 1.5}, {"index": True}])
def test_a_doc_without_a_usable_group_fails(fields: dict[str, Any]) -> None:
    with pytest.raises(DocError, match="circular_accuracy"):
        circular_group(fields)


def test_a_question_counts_only_when_every_rotation_is_right() -> None:
    items = [
        item(1, True), item(1_000_001, True), item(2_000_001, True),  # all right
        item(2, True), item(1_000_002, False),  # one rotation wrong
        item(3, False),
    ]  # fmt: skip
    assert circular_accuracy(items) == pytest.approx(1 / 3)
    assert CIRCULAR.score(None, ["A"], {"index": 4}) == {"group": 4, "correct": False}  # unparsed is wrong
    assert math.isnan(circular_accuracy([]))


def test_items_survive_a_json_round_trip() -> None:
    items = [item(1, True), item(1_000_001, False), item(2, True)]
    assert circular_accuracy(json.loads(json.dumps(items))) == circular_accuracy(items) == 0.5


def test_the_bootstrap_resamples_whole_questions_and_counts_repeats_apart() -> None:
    # q1 wrong in one of four rotations (row resampling could drop that row and call it right);
    # q2 and q3 right in every rotation (merging repeated draws would undercount them).
    items = [item(1 + k * 1_000_000, k != 3) for k in range(4)]
    items += [item(g + k * 1_000_000, True) for g in (2, 3) for k in range(4)]
    random.Random(0).shuffle(items)
    order = list(dict.fromkeys(i["group"] for i in items))
    right = {1: 0.0, 2: 1.0, 3: 1.0}
    rng = random.Random(5)
    draws = []
    for _ in range(200):
        picks = [order[rng.randrange(3)] for _ in range(3)]
        draws.append(sum(right[g] for g in picks) / 3)
    mean = sum(draws) / len(draws)
    expected = math.sqrt(sum((d - mean) ** 2 for d in draws) / (len(draws) - 1))

    got = summarize(CIRCULAR, items, bootstrap_iters=200, seed=5)["circular_accuracy"]
    assert got["value"] == pytest.approx(2 / 3)
    assert got["stderr"] == pytest.approx(expected)
    assert summarize(CIRCULAR, items, bootstrap_iters=200, seed=5) == {"circular_accuracy": got}
    assert summarize(CIRCULAR, items, bootstrap_iters=200, seed=6)["circular_accuracy"]["stderr"] != got["stderr"]


def test_one_question_has_no_bootstrap_stderr() -> None:
    items = [item(1, True), item(1_000_001, True)]
    assert summarize(CIRCULAR, items)["circular_accuracy"] == {"value": 1.0, "stderr": None}


def test_bootstrap_without_clusters_resamples_items() -> None:
    metric = Metric("median_like", lambda p, t, f: 0.0, aggregate=lambda xs: max(xs), stderr="bootstrap")
    items = [0.0, 0.0, 1.0]
    rng = random.Random(3)
    draws = [max(items[rng.randrange(3)] for _ in range(3)) for _ in range(50)]
    mean = sum(draws) / 50
    expected = math.sqrt(sum((d - mean) ** 2 for d in draws) / 49)
    assert summarize(metric, items, bootstrap_iters=50, seed=3)["median_like"]["stderr"] == pytest.approx(expected)


def result(metric: str | None, values: dict[str, tuple[float | None, float | None]]) -> dict[str, Any]:
    return {"headline_metric": metric, "metrics": {k: {"value": v, "stderr": e} for k, (v, e) in values.items()}}


@pytest.fixture()
def test_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    """Metrics with other normalizations, registered for one test."""
    for metric in (
        Metric("t_total", lambda p, t, f: 0.0, to_100=lambda v: 100.0 * v / 2000.0),  # a score out of 2000
        Metric("t_capped", lambda p, t, f: 0.0, to_100=lambda v: min(100.0, 100.0 * v)),  # unbounded, capped
        Metric("t_split", lambda p, t, f: 0.0, stderr="bootstrap", headline="all"),  # a dict aggregate
        Metric("t_split_nohead", lambda p, t, f: 0.0, stderr="bootstrap"),
        Metric("t_raw", lambda p, t, f: 0.0, to_100=None),  # not comparable
    ):
        monkeypatch.setitem(METRICS._items, metric.name, metric)


@pytest.mark.usefixtures("test_metrics")
def test_overall_is_the_equal_weight_mean_of_normalized_headlines() -> None:
    results = {
        "a": result("accuracy", {"accuracy": (0.5, 0.1), "exact_match": (0.9, 0.0)}),
        "b": result("t_total", {"t_total": (1500.0, 20.0)}),
        "c": result("t_capped", {"t_capped": (1.3, 0.1)}),
        "d": result("t_split", {"t_split_all": (0.2, 0.02), "t_split_part": (0.9, 0.01)}),
        "e": result("t_raw", {"t_raw": (7.0, 1.0)}),
        "f": result("t_split_nohead", {"t_split_nohead_x": (0.2, 0.0)}),
        "g": result("accuracy", {"accuracy": (None, None)}),
        "h": result(None, {}),
        "i": result("no_such_metric", {"no_such_metric": (1.0, 0.0)}),
    }
    out = overall_score(results)
    assert out["per_task"] == pytest.approx({"a": 50.0, "b": 75.0, "c": 100.0, "d": 20.0})
    assert out["headline_metrics"] == {"a": "accuracy", "b": "t_total", "c": "t_capped", "d": "t_split_all"}
    assert out["overall"] == pytest.approx((50 + 75 + 100 + 20) / 4) and out["n_tasks"] == 4
    # stderrs mapped onto 0-100 by central difference (0 where the cap flattens the map), tasks independent
    assert out["stderr"] == pytest.approx(math.sqrt(10**2 + 1**2 + 0**2 + 2**2) / 4)
    reasons = {e["task"]: e["reason"] for e in out["excluded"]}
    assert set(reasons) == {"e", "f", "g", "h", "i"}
    assert "no 0-100 mapping" in reasons["e"] and "no scored docs" in reasons["g"]
    assert "no headline metric" in reasons["h"] and "unknown metric" in reasons["i"]
    assert "t_split_nohead" in reasons["f"]


def test_overall_without_comparable_tasks_or_stderrs() -> None:
    assert overall_score({})["overall"] is None
    out = overall_score({"a": result("accuracy", {"accuracy": (1.0, None)}), "b": result("accuracy", {})})
    assert (out["overall"], out["stderr"]) == (100.0, None)


class EchoModel(Model):
    """Answers each prompt with its last line (test-only)."""

    name: ClassVar[str] = "echo_test"

    class Args:
        pass

    @classmethod
    def from_args(cls, raw: dict[str, str]) -> Model:
        return cls(None)

    def __init__(self, args: Any) -> None:
        pass

    def generate(self, requests: list[Request]) -> list[Response]:
        return [Response(r.id, text=r.messages[-1].text.splitlines()[-1]) for r in requests]

    def loglikelihood(self, requests: list[Request]) -> list[Response]:
        raise NotImplementedError

    def fingerprint(self) -> dict[str, Any]:
        return {"echo": 1}


TASKS = """\
task: circ
group: both
dataset: {data_files: {test: circ.jsonl}}
split: test
doc_id: index
doc_to_messages: [{role: user, content: [{text: "{question}\\n{options}\\n{say}"}]}]
output_type: multiple_choice
mc_mode: gen
choices: choices
target: answer
metrics: [circular_accuracy, accuracy]
---
task: yn
group: both
dataset: {data_files: {test: yn.jsonl}}
split: test
doc_to_messages: [{role: user, content: [{text: "{say}"}]}]
output_type: generate
extractor: yes_no_pope
target: answer
metrics: [exact_match]
"""


def test_a_run_of_several_tasks_writes_the_overall_score(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(MODELS._items, "echo_test", EchoModel)
    rows = []
    for q, says in enumerate([["B", "C", "D", "A"], ["B", "C", "no idea", "A"], ["B", "B", "B", "B"]]):
        for k, say in enumerate(says):  # rotation k moves the right option (first: B) k places on
            rows.append({"index": q + k * 1_000_000, "question": "Which?", "choices": ["w", "x", "y", "z"],
                         "answer": "ABCD"[(1 + k) % 4], "say": say})  # fmt: skip
    (tmp_path / "circ.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    yn = [{"say": "No, none.", "answer": "no"}, {"say": "Yes", "answer": "yes"}, {"say": "NO", "answer": "no"}]
    (tmp_path / "yn.jsonl").write_text("".join(json.dumps(r) + "\n" for r in yn))
    for i, text in enumerate(TASKS.split("---\n")):
        (tmp_path / f"t{i}.yaml").write_text(text)
    config = RunConfig(model="echo_test", tasks=["both"], include_path=[str(tmp_path)], bootstrap_iters=100)
    run, _ = evaluate(config, output_path=tmp_path / "runs", progress=False)
    summary = json.loads((run.root / "results.json").read_text())

    circ, yes_no = summary["results"]["circ"], summary["results"]["yn"]
    assert circ["headline_metric"] == "circular_accuracy" and circ["circular_accuracy,none"] == pytest.approx(1 / 3)
    assert circ["accuracy,none"] == pytest.approx(8 / 12) and circ["extract_rules"] == {"letter": 11, "unparsed": 1}
    assert circ["circular_accuracy_stderr,none"] > 0
    assert yes_no["exact_match,none"] == pytest.approx(2 / 3)  # POPE reads "NO" as yes
    overall = summary["overall"]
    assert overall["per_task"] == pytest.approx({"circ": 100 / 3, "yn": 200 / 3})
    assert overall["overall"] == pytest.approx(50.0) and overall["excluded"] == []
