"""PaCoST (`fastmmeval compare pacost`) with scripted models whose log-likelihoods the tests choose: the
confidences, Δ and the paired test come out as computed by hand, failed steps are counted and left out,
a rerun asks only what failed, a paraphrase that drops a number is refused."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from api_fixtures import FakeAPI
from image_tasks import png
from scipy import stats

from fastmmeval.cli import main
from fastmmeval.compare.pacost import confidence, missing_numbers, pacost
from fastmmeval.errors import ConfigError
from fastmmeval.live.roles import RoleSpec
from fastmmeval.models import MODELS, Model
from fastmmeval.protocol import Request, Response

CALLS: Counter[str] = Counter()  # "<model>:<kind>" -> requests answered

# Each doc: id, category, question, the paraphrase the scripted role writes (None: its call fails), the
# student's (log P(" Yes"), log P(" No")) after answering the question and after answering the paraphrase.
DOCS = [
    ("legs", "count", "How many legs do 2 spiders have?", "What number of legs do 2 spiders have together?",
     (-0.5, -1.5), (-1.0, -1.0)),
    ("wheels", "count", "How many wheels are on 3 bicycles?", "How many wheels do three bicycles have?",
     (-0.1, -3.0), (-0.2, -2.0)),  # drops the 3
    ("sky", "colour", "What colour is the sky?", "Which colour does the sky have?", (-0.2, -2.0), (-0.7, -0.9)),
    ("grass", "colour", "What colour is grass?", "Grass is which colour?", (-1.0, -0.5), (-0.3, -1.2)),
    ("coin", "shape", "What shape is a coin?", "Which shape does a coin have? (unscored)", (-0.4, -1.0), None),
    ("ball", "shape", "What shape is a ball?", None, (-0.4, -1.0), (-0.4, -1.0)),
    ("box", "shape", "What shape is a box?", "A box has which shape? (unanswered)", (-0.4, -1.0), (-0.4, -1.0)),
]  # fmt: skip
CHOICES = ["round", "square", "green", "eight"]
TASK = """\
task: {name}
dataset: {{data_files: {{test: rows.jsonl}}, image_root: images}}
split: test
doc_id: id
doc_to_messages: [{{role: user, content: [{{image: image}}, {{text: "{{question}}\\n{{options}}\\nAnswer with the option's letter."}}]}}]
output_type: multiple_choice
choices: choices
target: answer
mc_mode: {mode}
extractor: first_char
metrics: [accuracy]
breakdown: category
"""  # noqa: E501


def c(scores: tuple[float, float]) -> float:
    """The confidence the scores give, written out: P(yes) / (P(yes) + P(no))."""
    return math.exp(scores[0]) / (math.exp(scores[0]) + math.exp(scores[1]))


@dataclass
class TableArgs:
    table: str = ""  # a JSON file: text found in the request -> the reply (paraphraser) or the scores (student)
    fail_on: str = ""  # a generate request whose text holds this gets an error
    fail_scoring_on: str = ""  # a confidence request whose text holds this gets an error


class _Scripted(Model):
    Args = TableArgs

    def __init__(self, args: TableArgs) -> None:
        self.args = args
        self.table: dict[str, Any] = json.loads(Path(args.table).read_text())

    def fingerprint(self) -> dict[str, Any]:
        return {"model": self.name, "table": self.table, "fail_on": self.args.fail_on}

    @staticmethod
    def _holds(request: Request, text: str) -> bool:
        return bool(text) and any(text in m.text for m in request.messages)

    def _found(self, text: str) -> Any:
        return next((value for key, value in self.table.items() if key in text), None)


class Paraphraser(_Scripted):
    """Replies with the paraphrase scripted for the question its prompt shows."""

    name = "pacost_paraphraser"

    def generate(self, requests: list[Request]) -> list[Response]:
        CALLS[f"{self.name}:generate"] += len(requests)
        return [Response(r.id, error="HTTP 500: scripted failure") if self._holds(r, self.args.fail_on)
                else Response(r.id, text=f" {self._reply(r.messages[-1].text)}\n") for r in requests]

    def _reply(self, prompt: str) -> str:
        asked = next(line for line in prompt.splitlines() if line.startswith("Question: "))
        return self._found(prompt) or f"Reworded: {asked.removeprefix('Question: ')}"

    def loglikelihood(self, requests: list[Request]) -> list[Response]:
        raise AssertionError("the paraphraser is only asked to write")


class Student(_Scripted):
    """Answers every question "B"; in ppl mode scores option B best; scores " Yes"/" No" after its answer
    as scripted for the question (or paraphrase) its chat shows."""

    name = "pacost_student"

    def generate(self, requests: list[Request]) -> list[Response]:
        CALLS[f"{self.name}:generate"] += len(requests)
        return [Response(r.id, error="HTTP 500: scripted failure") if self._holds(r, self.args.fail_on)
                else Response(r.id, text="B") for r in requests]

    def loglikelihood(self, requests: list[Request]) -> list[Response]:
        CALLS[f"{self.name}:loglikelihood"] += len(requests)
        out = []
        for r in requests:
            if r.continuations != (" Yes", " No"):  # ppl mode: the options
                out.append(Response(r.id, logprobs=[-2.0 + (i == 1) for i in range(len(r.continuations))]))
            elif self._holds(r, self.args.fail_scoring_on) or self._found(r.messages[0].text) is None:
                out.append(Response(r.id, error="HTTP 500: scripted failure"))
            else:
                assert r.messages[-2].role == "assistant"
                assert r.messages[-1].text == "Is your answer correct? Answer Yes or No."
                out.append(Response(r.id, logprobs=list(self._found(r.messages[0].text))))
        return out


MODELS.add("pacost_paraphraser", Paraphraser)
MODELS.add("pacost_student", Student)


def write_tasks(folder: Path, docs: list[tuple[Any, ...]] = DOCS) -> Path:
    """Tasks quiz (asked by letter) and quiz_ppl (each option scored) over `docs`."""
    (folder / "images").mkdir(parents=True)
    rows = []
    for i, (doc_id, category, question, *_rest) in enumerate(docs):
        (folder / "images" / f"{doc_id}.png").write_bytes(png(color=(40 * i, 90, 200)))
        rows.append({"id": doc_id, "image": f"{doc_id}.png", "question": question, "choices": CHOICES,
                     "answer": "A", "category": category})
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name, mode in (("quiz", "gen"), ("quiz_ppl", "ppl")):
        (folder / f"{name}.yaml").write_text(TASK.format(name=name, mode=mode))
    return folder


def specs(folder: Path, docs: list[tuple[Any, ...]] = DOCS) -> tuple[RoleSpec, RoleSpec]:
    """The student (its confidence on `(unscored)` calls fails, its answer to `(unanswered)` too) and the
    paraphraser (failing on BALL-shaped questions) as the two roles."""
    scores = {q: orig for _, _, q, _, orig, _ in docs} | {p: para for _, _, _, p, _, para in docs if p and para}
    paraphrases = {q: p or "unused" for _, _, q, p, *_ in docs}
    (folder / "scores.json").write_text(json.dumps(scores))
    (folder / "paraphrases.json").write_text(json.dumps(paraphrases))
    student = RoleSpec("model", "pacost_student", {"table": str(folder / "scores.json"), "fail_on": "(unanswered)",
                                                   "fail_scoring_on": "(unscored)"})
    paraphraser = RoleSpec("paraphraser", "pacost_paraphraser",
                           {"table": str(folder / "paraphrases.json"), "fail_on": "a ball"})
    return student, paraphraser


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    return write_tasks(tmp_path / "tasks")


def test_confidence_delta_and_the_test_are_the_hand_values(tasks: Path, tmp_path: Path) -> None:
    student, paraphraser = specs(tasks)
    report = pacost(student, ["quiz"], paraphraser, tmp_path / "out", include_path=[tasks])
    quiz = report.tasks["quiz"]
    scored = {d[0]: d for d in DOCS if d[0] in ("legs", "sky", "grass")}
    assert [p.doc_id for p in quiz.pairs] == list(scored)
    for pair in quiz.pairs:
        _, category, question, paraphrase, orig, para = scored[pair.doc_id]
        assert (pair.question, pair.paraphrase, pair.categories) == (question, paraphrase, {"category": category})
        assert (pair.answer_orig, pair.answer_para) == ("B", "B")
        assert pair.c_orig == pytest.approx(c(orig), rel=1e-12)
        assert pair.c_para == pytest.approx(c(para), rel=1e-12)
        assert pair.delta == pytest.approx(c(orig) - c(para), rel=1e-12)
    deltas = [0.2310585786300049, 0.3083149380, -0.3334088338]  # by hand: legs, sky, grass
    assert [p.delta for p in quiz.pairs] == pytest.approx(deltas, rel=1e-9)
    origs, paras = [p.c_orig for p in quiz.pairs], [p.c_para for p in quiz.pairs]
    s, scipy_t = quiz.stats, stats.ttest_rel(origs, paras, alternative="greater")
    assert (s.n, s.t, s.p) == (3, pytest.approx(scipy_t.statistic), pytest.approx(scipy_t.pvalue))
    assert (s.mean, s.std) == (pytest.approx(sum(deltas) / 3), pytest.approx(stats.tstd(deltas)))
    assert s.d == pytest.approx(s.mean / s.std)
    by_category = quiz.categories()["category"]
    assert by_category["colour"].n == 2 and by_category["colour"].mean == pytest.approx((deltas[1] + deltas[2]) / 2)
    assert (by_category["count"].n, by_category["count"].t, by_category["count"].d) == (1, None, None)
    assert "shape" not in by_category  # all three shape docs failed


def test_failed_steps_are_counted_and_left_out(tasks: Path, tmp_path: Path) -> None:
    student, paraphraser = specs(tasks)
    pacost(student, ["quiz"], paraphraser, tmp_path / "out", include_path=[tasks])
    written = json.loads((tmp_path / "out" / "pacost.json").read_text())
    quiz = written["tasks"]["quiz"]
    assert quiz["docs"] == 7 and quiz["delta"]["n"] == 3
    assert quiz["failed"] == {"paraphrase": 1, "numbers": 1, "answer": 1, "confidence": 1}
    reasons = {f["doc_id"]: (f["stage"], f["reason"]) for f in quiz["failures"]}
    assert reasons["wheels"] == ("numbers", "the paraphrase drops the number(s) 3")
    assert reasons["ball"][0] == "paraphrase" and "HTTP 500" in reasons["ball"][1]
    assert reasons["box"][0] == "answer" and "HTTP 500" in reasons["box"][1]
    assert reasons["coin"][0] == "confidence" and "HTTP 500" in reasons["coin"][1]
    assert [p["paraphrase"] for p in quiz["pairs"]] == [DOCS[0][3], DOCS[2][3], DOCS[3][3]]  # saved with the output
    assert written["prompts"]["paraphrase"]["id"] == "paraphrase@1"


def test_a_rerun_asks_only_what_failed(tasks: Path, tmp_path: Path) -> None:
    student, paraphraser = specs(tasks)
    first = pacost(student, ["quiz", "quiz_ppl"], paraphraser, tmp_path / "out", include_path=[tasks])
    before = Counter(CALLS)
    again = pacost(student, ["quiz", "quiz_ppl"], paraphraser, tmp_path / "out", include_path=[tasks])
    asked = CALLS - before
    # the ball's paraphrase (once per task: a failure is never cached), the box's paraphrased answer in quiz
    # (quiz_ppl scores the options: no failure), the coin's paraphrased confidence in both
    assert asked == Counter({"pacost_paraphraser:generate": 2, "pacost_student:generate": 1,
                             "pacost_student:loglikelihood": 2})
    for name in ("quiz", "quiz_ppl"):
        assert [p.delta for p in again.tasks[name].pairs] == [p.delta for p in first.tasks[name].pairs]


def test_a_clean_rerun_asks_nothing(tmp_path: Path) -> None:
    docs = [d for d in DOCS if d[0] in ("legs", "sky", "grass")]
    tasks = write_tasks(tmp_path / "tasks", docs)
    student, paraphraser = specs(tasks, docs)
    pacost(student, ["quiz_ppl"], paraphraser, tmp_path / "out", include_path=[tasks])
    before = Counter(CALLS)
    report = pacost(student, ["quiz_ppl"], paraphraser, tmp_path / "out", include_path=[tasks])
    assert before == CALLS
    calls = json.loads(report.path.read_text())["calls"]
    assert calls["paraphrase"] == {"cached": 3}
    assert calls["answer"] == {"cached": 6, "calls": 0} and calls["confidence"] == {"cached": 6, "calls": 0}


def test_ppl_mode_answers_with_the_option_its_headline_picks(tasks: Path, tmp_path: Path) -> None:
    student, paraphraser = specs(tasks)
    report = pacost(student, ["quiz_ppl"], paraphraser, tmp_path / "out", include_path=[tasks], limit=1)
    [pair] = report.tasks["quiz_ppl"].pairs
    assert (pair.answer_orig, pair.answer_para) == ("square", "square")  # option B scores best
    assert pair.c_orig == pytest.approx(c(DOCS[0][4]))


@pytest.mark.parametrize(("original", "paraphrase", "missing"), [
    ("How many legs do 2 spiders have?", "What number of legs do 2 spiders have?", []),
    ("Is 2.5 more than 2?", "Does 2 fall below 2.5?", []),
    ("Add 3 and 3.", "Sum 3 with itself.", ["3"]),  # each number as often as the question writes it
    ("About 1,000 people or 12?", "Roughly 1000 people, or 12?", ["1,000"]),  # written as the question writes it
    ("How many cats are in 3 boxes?", "How many cats are in three boxes?", ["3"]),
])  # fmt: skip
def test_every_number_in_digits_must_come_back(original: str, paraphrase: str, missing: list[str]) -> None:
    assert missing_numbers(original, paraphrase) == missing


def test_confidence_is_normalised_over_yes_and_no() -> None:
    assert confidence(math.log(0.6), math.log(0.2)) == pytest.approx(0.75)
    assert confidence(-1000.0, -1001.0) == pytest.approx(1 / (1 + math.exp(-1)))  # no underflow


def test_a_question_field_the_docs_lack_or_the_prompt_hides_is_refused(tasks: Path, tmp_path: Path) -> None:
    student, paraphraser = specs(tasks)
    with pytest.raises(ConfigError, match="no field 'prompt' to paraphrase"):
        pacost(student, ["quiz"], paraphraser, tmp_path / "out", include_path=[tasks], question_field="prompt")
    with pytest.raises(ConfigError, match="does not show the question's field"):
        pacost(student, ["quiz"], paraphraser, tmp_path / "out2", include_path=[tasks], question_field="category")


def test_a_backend_without_log_probabilities_is_refused_before_any_call(tasks: Path, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PACOST_TEST_KEY", "unused")
    _, paraphraser = specs(tasks)
    claude = RoleSpec("model", "anthropic", {"model": "claude-x", "api_key_env": "PACOST_TEST_KEY"})
    before = Counter(CALLS)
    with pytest.raises(ConfigError, match="model 'anthropic': the Messages API gives no log-probabilities"):
        pacost(claude, ["quiz"], paraphraser, tmp_path / "out", include_path=[tasks])
    assert before == CALLS


def test_a_server_without_loglikelihood_stops_the_run_naming_it(tasks: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    def chat_only(number: int, body: dict[str, Any]) -> web.Response:
        if "continuations" in body:
            return web.json_response({"error": {"message": "Not Found"}}, status=404)
        return web.json_response({"choices": [{"message": {"content": "B"}}], "usage": {}})

    monkeypatch.setenv("PACOST_TEST_KEY", "unused")
    _, paraphraser = specs(tasks)
    with FakeAPI(chat_only) as server:
        chat = RoleSpec("model", "openai", {"base_url": server.url, "model": "m", "api_key_env": "PACOST_TEST_KEY",
                                            "cache_dir": "off", "max_retries": "0"})
        with pytest.raises(ConfigError, match=r"model 'openai': .*offers no POST /loglikelihood"):
            pacost(chat, ["quiz"], paraphraser, tmp_path / "out", include_path=[tasks], limit=1)
        assert [path for path, *_ in server.calls] == ["/v1/chat/completions"] * 2 + ["/v1/loglikelihood"] * 2


def test_the_cli_writes_pacost_json(tasks: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    student, paraphraser = specs(tasks)

    def model_args(spec: RoleSpec) -> str:
        return ",".join(f"{k}={v}" for k, v in spec.args.items())

    rc = main(["compare", "pacost", "--model", student.model, "--model_args", model_args(student),
               "--tasks", "quiz,quiz_ppl", "--paraphraser", paraphraser.model,
               "--paraphraser_args", model_args(paraphraser), "--include_path", str(tasks),
               "--out", str(tmp_path / "out"), "--limit", "4"])  # fmt: skip
    assert rc == 0
    written = json.loads((tmp_path / "out" / "pacost.json").read_text())
    assert {name: t["docs"] for name, t in written["tasks"].items()} == {"quiz": 4, "quiz_ppl": 4}
    shown = capsys.readouterr().out
    assert "quiz: 3 pairs of 4 docs (left out: numbers 1)" in shown and "pacost.json" in shown
