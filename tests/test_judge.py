"""The judge's parts: the repairing parser, prompt readers, the Judge wrapper and the agreement
statistics (checked against scikit-learn's Cohen's kappa and the `krippendorff` package)."""

from __future__ import annotations

import math
import random

import krippendorff
import pytest
from judge_fixtures import CALLS, reset  # also registers the scripted judge
from sklearn.metrics import cohen_kappa_score
from task_fixtures import photo

from fastmmeval.errors import ConfigError
from fastmmeval.judge import (
    PROMPTS,
    Judge,
    JudgeInput,
    JudgePrompt,
    JudgeSpec,
    JudgmentError,
    cohen_kappa,
    judge_specs,
    krippendorff_alpha,
    parse_object,
    rating,
)
from fastmmeval.protocol import ImagePart, Request, Response, TextPart


@pytest.mark.parametrize(
    "reply",
    [
        '{"score": 7}',
        '  {"score": 7, "reason": "ok"}\n',
        'Here you go:\n```json\n{"score": 7}\n```\nThanks',
        '```\n{"score": 7}\n```',
        'I think {"score": 7} is fair. {"other": 1}',
        'The grade {not json} follows: {"score": 7}',
    ],
)
def test_the_parser_repairs_common_damage(reply: str) -> None:
    assert parse_object(reply)["score"] == 7


@pytest.mark.parametrize("value", [7, 7.0, "7", " 7 ", "7/10", "7.0"])
def test_ratings_may_be_numbers_or_numeric_strings(value: object) -> None:
    assert rating({"score": value}, "score", 0, 10) == 7.0


@pytest.mark.parametrize("obj", [{}, {"score": "seven"}, {"score": 11}, {"score": -1}, {"score": True}, {"score": ""}])
def test_bad_ratings_are_errors_never_clipped(obj: dict) -> None:
    with pytest.raises(JudgmentError):
        rating(obj, "score", 0, 10)


def test_a_reply_without_an_object_is_an_error() -> None:
    with pytest.raises(JudgmentError, match="no JSON object"):
        parse_object("I'd give it a seven.")


def test_the_option_reader_takes_json_or_a_bare_letter_and_z_means_none() -> None:
    read = PROMPTS.get("mmbench_option").read
    case = JudgeInput("q", "a", options=["cat", "dog", "cow"])
    assert read('{"option": "B"}', case) == "B"
    assert read("C", case) == "C"
    assert read('{"option": "Z"}', case) is None
    with pytest.raises(JudgmentError, match="not one of the 3 options"):
        read('{"option": "D"}', case)


def test_prompts_are_versioned_and_render_every_input() -> None:
    prompt = PROMPTS.get("judge_score")
    assert prompt.id == "judge_score@1"
    text = prompt.render(JudgeInput("<image>\nWhat digit?", "7", ["7"], criteria="a single digit"))
    assert "What digit?" in text and "<image>" not in text and "a single digit" in text


def test_a_judge_turns_backend_failures_and_unreadable_replies_into_recorded_errors() -> None:
    reset()
    judge = Judge(JudgeSpec("j", "scripted_judge", {"fail_on": "BOOM", "garbage_on": "???", "damage": "prose"}))
    prompt = PROMPTS.get("judge_score")
    verdicts = judge.ask([
        ("d1", prompt, JudgeInput("q", "7", ["7"])),
        ("d2", prompt, JudgeInput("q", "BOOM", ["7"])),
        ("d3", prompt, JudgeInput("q", "???", ["7"])),
    ])  # fmt: skip
    assert [v.value for v in verdicts] == [10.0, None, None]
    assert "scripted judge failure" in verdicts[1].error
    assert verdicts[2].raw == "I would rather not grade this one." and "no JSON object" in verdicts[2].error
    assert CALLS["scripted_judge:judge"] == 3


def test_a_prompt_that_shows_the_images_sends_them_first_and_the_others_send_text_only() -> None:
    """The doc's images reach the judge only through a prompt with `images` (as LiveBench's), ahead of its
    text in the one user message; a text prompt's request carries none."""
    sent: list[Request] = []

    class Recorder:
        def generate(self, requests: list[Request]) -> list[Response]:
            sent.extend(requests)
            return [Response(r.id, text='{"score": 10}') for r in requests]

    shots = (photo(0, 32), photo(1, 24))
    case = JudgeInput("What does the page say?", "Hello", ["Hello"], "10 points for Hello.", images=shots)
    text_only = PROMPTS.get("judge_score")
    shown = JudgePrompt("shown", 1, "", "[Question]\n{question}\n[Answer]\n{answer}", text_only.read, "interval", float,
                        images=True)  # fmt: skip
    verdicts = Judge(JudgeSpec("j", "scripted_judge"), Recorder()).ask([("a", shown, case), ("b", text_only, case)])
    assert [v.value for v in verdicts] == [10.0, 10.0]
    [with_images], [without] = sent[0].messages, [m for m in sent[1].messages if m.role == "user"]
    assert [type(p) for p in with_images.content] == [ImagePart, ImagePart, TextPart]
    assert with_images.images == list(shots) and with_images.content[-1].text == shown.render(case)
    assert without.images == [] and sent[1].images == []


def test_judges_come_from_flags_or_a_config_file(tmp_path) -> None:
    config = tmp_path / "judges.yaml"
    config.write_text(
        "judges:\n  - {name: a, model: scripted_judge}\n  - {name: b, model: scripted_judge, args: {harsh: true}}\n"
    )

    specs = judge_specs(None, "", config)
    assert [(s.name, s.args) for s in specs] == [("a", {}), ("b", {"harsh": "True"})]
    flagged = judge_specs("scripted_judge", "damage=fenced")
    assert flagged == [JudgeSpec("judge", "scripted_judge", {"damage": "fenced"})]
    with pytest.raises(ConfigError, match="unknown model 'nope'"):
        judge_specs("nope")
    with pytest.raises(ConfigError, match=r"judge 'judge' \(scripted_judge\) args: unknown argument 'dmage'; did you"):
        judge_specs("scripted_judge", "dmage=fenced")
    with pytest.raises(ConfigError, match="without --judge_model"):
        judge_specs(None, "model=x")


def _random_table(rng: random.Random, raters: int, items: int, labels: list, missing: float) -> list[list]:
    return [[rng.choice(labels) if rng.random() >= missing else None for _ in range(items)] for _ in range(raters)]


@pytest.mark.parametrize("seed", range(5))
def test_cohen_kappa_matches_scikit_learn(seed: int) -> None:
    rng = random.Random(seed)
    a = [rng.choice("ABCZ") for _ in range(60)]
    b = [x if rng.random() < 0.6 else rng.choice("ABCZ") for x in a]
    assert cohen_kappa(a, b) == pytest.approx(cohen_kappa_score(a, b), abs=1e-12)


def test_cohen_kappa_edge_cases() -> None:
    assert cohen_kappa("AB", "AB") == 1.0
    assert math.isnan(cohen_kappa("AAA", "AAA"))  # no variation: chance agreement is 1
    assert cohen_kappa("AB", "BA") == pytest.approx(cohen_kappa_score(list("AB"), list("BA")))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("level", ["interval", "nominal"])
def test_krippendorff_alpha_matches_the_krippendorff_package(seed: int, level: str) -> None:
    rng = random.Random(seed)
    labels = list(range(11)) if level == "interval" else [0, 1, 2, 3]
    table = _random_table(rng, raters=rng.randint(2, 4), items=40, labels=labels, missing=0.2)
    for k in range(40):  # some agreement, so alpha is not near 0
        if rng.random() < 0.5 and table[0][k] is not None:
            for row in table[1:]:
                row[k] = table[0][k]
    ours = krippendorff_alpha(table, level)
    data = [[math.nan if v is None else v for v in row] for row in table]
    peer = krippendorff.alpha(data, level_of_measurement=level)
    assert ours == pytest.approx(peer, abs=1e-9)


def test_krippendorff_alpha_edge_cases() -> None:
    assert krippendorff_alpha([[1, 2, 3], [1, 2, 3]]) == 1.0
    assert math.isnan(krippendorff_alpha([[5, 5], [5, 5]]))  # no variation
    assert math.isnan(krippendorff_alpha([[1, None], [None, 2]]))  # nothing pairable
    with pytest.raises(ValueError):
        krippendorff_alpha([[1, 2], [1]])
