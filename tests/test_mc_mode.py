"""Multiple choice asked two ways (`--mc_mode gen|ppl`): gen generates and reads the letter, ppl scores each
option's text by log-likelihood and reports lm-evaluation-harness's `acc` (summed log-probability) and
`acc_norm` (log-probability per UTF-8 byte of the option text), checked against lmms-eval 0.7.3's own
multiple-choice scoring; and both modes on the real SmolLM2 (marked slow)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import skimage.data
from hypothesis import given
from hypothesis import strategies as st
from peer_lmms_eval import lmms_eval_module

from fastmmeval.cli import main
from fastmmeval.errors import ConfigError, DocError
from fastmmeval.evaluate import RunConfig, evaluate
from fastmmeval.metrics.likelihood import OptionLikelihoods
from fastmmeval.models import MODELS, Model
from fastmmeval.protocol import Request, Response
from fastmmeval.tasks import Task, resolve
from fastmmeval.tasks.card import protocol_card
from fastmmeval.tasks.catalog import Catalog
from fastmmeval.tasks.config import parse_task, ppl_messages, with_mc_mode

INSTRUCTION = "\nAnswer with the option's letter from the given choices directly."
TASK = """\
task: local_mc
dataset: {data_files: {test: mc.jsonl}}
split: test
doc_id: id
doc_to_messages:
  - role: user
    content:
      - image: image
      - text: "{question}\\n{options}\\nAnswer with the option's letter from the given choices directly."
output_type: multiple_choice
choices: choices
target: answer
metrics: [accuracy]
ppl: {headline: acc_norm}
"""
# d0: the right option is the long one; its summed log-probability is lower, its log-probability per byte
# higher (-9/15 > -4/5), so acc gets it wrong and acc_norm right. d1: both right.
DOCS = [
    {"id": "d0", "question": "What is on the table?", "choices": ["A cat", "A cup of coffee"], "answer": "B"},
    {"id": "d1", "question": "What color is the bus?", "choices": ["Red", "Blue"], "answer": "A"},
]
LOGPROBS = {"local_mc/d0": [-4.0, -9.0], "local_mc/d1": [-1.0, -3.0]}
ANSWERS = {"local_mc/d0": "B", "local_mc/d1": "B"}


@dataclass
class ScriptedArgs:
    pass


@MODELS.register("scripted_options")
class ScriptedOptions(Model):
    """Answers LOGPROBS for loglikelihood requests and ANSWERS for generate ones."""

    name = "scripted_options"
    Args = ScriptedArgs

    def __init__(self, args: ScriptedArgs) -> None:
        self.args = args

    def generate(self, requests: list[Request]) -> list[Response]:
        return [Response(r.id, text=ANSWERS[r.id]) for r in requests]

    def loglikelihood(self, requests: list[Request]) -> list[Response]:
        return [Response(r.id, logprobs=LOGPROBS[r.id], is_greedy=[False] * len(r.continuations)) for r in requests]

    def fingerprint(self) -> dict[str, Any]:
        return {"scripted": self.name}


@pytest.fixture()
def task_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "chelsea.png").write_bytes((Path(skimage.data.__file__).parent / "chelsea.png").read_bytes())
    (folder / "mc.jsonl").write_text("".join(json.dumps({**d, "image": "chelsea.png"}) + "\n" for d in DOCS))
    (folder / "local_mc.yaml").write_text(TASK)
    return folder


def run(task_dir: Path, out: Path, *extra: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run local_mc with the scripted model; its results and samples."""
    args = ["run", "--model", "scripted_options", "--tasks", "local_mc", "--include_path", str(task_dir),
            "--output_path", str(out), "--no_progress", "--bootstrap_iters", "0", *extra]  # fmt: skip
    assert main(args) == 0
    [folder] = out.iterdir()
    results = json.loads((folder / "results.json").read_text())["results"]["local_mc"]
    samples = [json.loads(line) for line in (folder / "samples" / "local_mc.jsonl").read_text().splitlines()]
    return results, samples


def test_acc_sums_log_probabilities_and_acc_norm_divides_by_utf8_bytes() -> None:
    scored = OptionLikelihoods((-4.0, -9.0), ("A cat", "A cup of coffee"))
    assert (scored.best(per_byte=False), scored.best(per_byte=True)) == (0, 1)
    # Bytes, not characters: "café" is 5 bytes (-4.1/5 > -4.0/4); per character it would lose (-4.1/4).
    accented = OptionLikelihoods((-4.1, -4.0), ("café", "cafe"))
    assert (accented.best(per_byte=False), accented.best(per_byte=True)) == (1, 0)
    assert OptionLikelihoods((-2.0, -2.0), ("ab", "cd")).best(per_byte=True) == 0  # the first of equals


@given(
    st.lists(
        st.tuples(st.floats(-50.0, -0.01), st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=1)),
        min_size=2,
        max_size=6,
    ),
    st.data(),
)
def test_acc_and_acc_norm_equal_lmms_evals_multiple_choice_scoring(options: list[tuple[float, str]], data: Any) -> None:
    """lmms-eval 0.7.3's ConfigurableTask.process_results takes the argmin of what its models return, a loss
    (-log-probability), and divides by len(option) in characters: on ASCII options that is lm-evaluation-harness's
    argmax of the log-probability, raw and per byte."""
    logprobs, texts = [lp for lp, _ in options], [t for _, t in options]
    gold = data.draw(st.integers(0, len(texts) - 1))
    peer = lmms_eval_module("api.task").ConfigurableTask.process_results.__wrapped__
    fake = SimpleNamespace(
        OUTPUT_TYPE="multiple_choice", config=SimpleNamespace(process_results=None),
        _metric_fn_list={"acc": None, "acc_norm": None}, doc_to_choice=lambda doc: texts,
        doc_to_target=lambda doc: gold, multiple_input=0, multiple_target=0,
    )  # fmt: skip
    theirs = peer(fake, {}, [(-lp, False) for lp in logprobs])
    scored = OptionLikelihoods(tuple(logprobs), tuple(texts))
    assert theirs == {"acc": float(scored.best(False) == gold), "acc_norm": float(scored.best(True) == gold)}


def test_ppl_prompt_is_the_gen_prompt_cut_after_the_options(task_dir: Path) -> None:
    config = parse_task(task_dir / "local_mc.yaml")
    [turn] = ppl_messages(config)
    assert turn.parts == (("image", "image"), ("text", "{question}\n{options}"))
    literal = replace(config, doc_to_messages=(replace(turn, parts=(("text", "{{x}} {options!s:>3} {{y}} {q}"),)),))
    assert ppl_messages(literal)[0].parts == (("text", "{{x}} {options!s:>3}"),)


def test_a_ppl_block_sets_the_prompt_headline_and_delimiter(task_dir: Path) -> None:
    path = task_dir / "local_mc.yaml"
    prompt = '[{role: user, content: [{text: "{question} Answer:"}]}]'
    block = f'ppl: {{headline: acc, target_delimiter: " ", doc_to_messages: {prompt}}}'
    path.write_text(TASK.replace("ppl: {headline: acc_norm}", block).replace("metrics:", "mc_mode: ppl\nmetrics:"))
    config = parse_task(path)
    assert ppl_messages(config)[0].parts == (("text", "{question} Answer:"),)
    task = Task(config)
    request = task.request(task.doc(task.doc_refs()[0]), seed=0)
    assert request.kind == "loglikelihood" and request.continuations == (" A cat", " A cup of coffee")
    assert [m.text for m in request.messages] == ["What is on the table? Answer:"]
    assert [m.name for m in task.metrics] == ["acc", "acc_norm", "accuracy"] and task.headline_metric == "acc"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("ppl: {headline: acc_norm}", "ppl: {headline: accuracy}"), "field 'headline': must be acc or acc_norm"),
        (("ppl: {headline: acc_norm}", "ppl: {headlines: acc}"), "unknown ppl setting; did you mean 'headline'"),
        (("output_type: multiple_choice", "output_type: generate\nextractor: raw"), "only multiple_choice tasks"),
        (("{options}", "{choices}"), "ppl mode needs `ppl: {doc_to_messages: ...}`"),
    ],
)
def test_a_bad_ppl_setting_names_the_file(task_dir: Path, change: tuple[str, str], message: str) -> None:
    path = task_dir / "local_mc.yaml"
    path.write_text(TASK.replace(*change).replace("metrics:", "mc_mode: ppl\nmetrics:"))
    with pytest.raises(ConfigError, match="local_mc.yaml") as e:
        parse_task(path)
    assert message in str(e.value)


def test_an_empty_option_fails_its_doc_in_ppl_mode(task_dir: Path) -> None:
    doc = {"id": "e", "image": "chelsea.png", "question": "Which?", "choices": ["Red", ""], "answer": "A"}
    (task_dir / "mc.jsonl").write_text(json.dumps(doc) + "\n")
    [task] = resolve(["local_mc"], [task_dir], mc_mode="ppl")
    with pytest.raises(DocError, match="task local_mc, doc e: option B is empty"):
        task.request(task.doc(task.doc_refs()[0]), seed=0)


def test_acc_and_acc_norm_are_not_listed_in_a_task_file(task_dir: Path) -> None:
    (task_dir / "local_mc.yaml").write_text(TASK.replace("[accuracy]", "[acc]"))
    with pytest.raises(ConfigError, match="ppl mode reports them itself"):
        resolve(["local_mc"], [task_dir])


def test_the_mode_is_in_the_fingerprint_and_gen_keeps_every_builtin_fingerprint() -> None:
    tasks = Catalog().tasks
    for name, config in tasks.items():
        gen, ppl = with_mc_mode(config, "gen"), with_mc_mode(config, "ppl")
        if config.output_type == "generate":
            assert gen is config and ppl is config, name  # untouched
            continue
        assert ppl.mc_mode == "ppl" and ppl.fingerprint() != gen.fingerprint(), name
        if config.mc_mode == "gen":
            assert gen.fingerprint() == config.fingerprint(), name
        assert [m.parts for m in ppl_messages(ppl)] != [m.parts for m in ppl.doc_to_messages], name  # instruction cut
    demo = tasks.get("demo_objects")
    headline = replace(demo, ppl=replace(demo.ppl, headline="acc"))
    assert headline.fingerprint() != demo.fingerprint()


def test_the_protocol_card_shows_how_a_task_is_asked_in_ppl_mode() -> None:
    tasks = Catalog().tasks
    prompt = "[user] <image:image>{question}\n{options}"
    assert protocol_card(tasks.get("demo_objects"))["ppl"] == {
        "prompt": prompt, "headline": "acc_norm", "target_delimiter": ""}  # fmt: skip
    assert protocol_card(tasks.get("demo_digits"))["ppl"] is None  # a generate task


def test_a_ppl_block_does_not_change_a_gen_fingerprint(task_dir: Path) -> None:
    with_block = parse_task(task_dir / "local_mc.yaml")
    (task_dir / "local_mc.yaml").write_text(TASK.replace("ppl: {headline: acc_norm}\n", ""))
    assert parse_task(task_dir / "local_mc.yaml").fingerprint() == with_block.fingerprint()


def test_run_mc_mode_ppl_reports_acc_and_acc_norm_and_gen_the_task_metrics(task_dir: Path, tmp_path: Path) -> None:
    ppl, samples = run(task_dir, tmp_path / "ppl", "--mc_mode", "ppl")
    assert (ppl["mc_mode"], ppl["headline_metric"], ppl["headline_as"]) == ("ppl", "acc_norm", "acc_norm")
    assert (ppl["acc,none"], ppl["acc_norm,none"], ppl["accuracy,none"]) == (0.5, 1.0, 1.0)
    assert ppl["acc_stderr,none"] == 0.5 and ppl["acc_norm_stderr,none"] == 0.0
    assert ppl["extract_rules"] == {"loglikelihood_argmax_per_byte": 2}
    d0 = samples[0]
    assert d0["prompt"][0]["content"] == "<image>What is on the table?\nA. A cat\nB. A cup of coffee"
    assert d0["continuations"] == ["A cat", "A cup of coffee"] and d0["metrics"] == {
        "acc_norm": 1.0, "acc": 0.0, "accuracy": 1.0}  # fmt: skip

    gen, samples = run(task_dir, tmp_path / "gen", "--mc_mode", "gen")
    default, _ = run(task_dir, tmp_path / "default")
    assert (gen["mc_mode"], gen["headline_metric"], gen["accuracy,none"]) == ("gen", "accuracy", 0.5)
    assert "acc,none" not in gen and samples[0]["prompt"][0]["content"].endswith(INSTRUCTION)
    assert gen["fingerprint"] == default["fingerprint"] != ppl["fingerprint"]


def test_the_task_metrics_keep_their_result_keys_beside_acc(task_dir: Path, tmp_path: Path) -> None:
    entry = "[{metric: accuracy, as: exact_match, filter: flexible-extract, scale: 100}]"
    (task_dir / "local_mc.yaml").write_text(TASK.replace("[accuracy]", entry))
    ppl, _ = run(task_dir, tmp_path / "ppl", "--mc_mode", "ppl")
    assert (ppl["acc,none"], ppl["acc_norm,none"], ppl["exact_match,flexible-extract"]) == (0.5, 1.0, 100.0)


def test_mc_mode_is_checked_before_anything_loads(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["run", "--model", "no_such_model", "--tasks", "demo_objects", "--mc_mode", "letters"])
    assert e.value.code == 2 and "argument --mc_mode: invalid choice: 'letters'" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--mc_mode must be gen or ppl, got 'letters'"):
        evaluate(RunConfig(model="no_such_model", tasks=["demo_objects"], mc_mode="letters"), output_path=Path("."))
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "generate tasks (MMMU, MMStar, ...) are untouched" in " ".join(capsys.readouterr().out.split())


@pytest.mark.slow
def test_real_smollm2_on_demo_objects_in_both_modes(tmp_path: Path, one_torch_thread: None) -> None:
    from fastmmeval.evaluate import run_task
    from fastmmeval.models.socratic.socratic import Socratic, SocraticArgs
    from fastmmeval.results import RunDir

    model = Socratic(SocraticArgs(ocr=False))  # SmolLM2-135M-Instruct answering from ImageNet tags
    results, picks = {}, {}
    for mode in ("ppl", "gen"):
        [task] = resolve(["demo_objects"], mc_mode=mode)
        folder = RunDir(tmp_path / mode)
        results[mode] = run_task(model, task, folder, limit=4, batch_size=4, seed=0, progress=False, bootstrap_iters=0)
        picks[mode] = [s["extracted"] for s in folder.completed("demo_objects").values()]
    ppl, gen = results["ppl"], results["gen"]
    print(f"demo_objects, 4 docs: ppl acc={ppl['acc,none']} acc_norm={ppl['acc_norm,none']}; "
          f"gen accuracy={gen['accuracy,none']}")  # fmt: skip
    assert (ppl["n_failed"], ppl["headline_metric"], gen["n_failed"], gen["headline_metric"]) == (
        0, "acc_norm", 0, "accuracy")  # fmt: skip
    assert all(0.0 <= ppl[k] <= 1.0 for k in ("acc,none", "acc_norm,none")) and "acc,none" not in gen
    assert ppl["fingerprint"] != gen["fingerprint"] and picks["ppl"] != picks["gen"]
