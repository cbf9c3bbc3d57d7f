"""Kill -9 at seeded random moments, then resume: `run` (a local and an API model), `contam index` and
`contam add`, `lite select` end with the outputs of an uninterrupted run, byte for byte where the format
allows. Each flow is one chain of children (kill, resume, kill, ..., finish), KILL_POINTS kills long."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from api_fixtures import FakeAPI
from kill_helpers import CLI, KILL_POINTS, KILL_SEED, draw_moments, file_bytes, json_without, kill_and_resume, run_timed
from test_api_backends import KEY, KEY_ENV, echo
from test_evaluate import task_dir  # noqa: F401  (a fixture: two small local tasks over real photos)

ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # children share two cores with the test
RUN_VOLATILE = json_without("run_id", "started", "finished", "resumed", "command")
# A killed child's API calls are in no results.json: usage counts those of the children that wrote it.
API_VOLATILE = json_without("run_id", "usage")
LOCKS = frozenset({".lock"})  # who holds (or last held) a folder, not an output


def sample_lines(out: Path) -> int:
    """Sample lines written so far under a run output folder."""
    return sum(p.read_bytes().count(b"\n") for p in out.glob("*/samples/*.jsonl"))


def sample_ids(out: Path) -> list[str]:
    """The doc ids of the complete sample lines under a run output folder."""
    lines = (line for p in out.glob("*/samples/*.jsonl") for line in p.read_bytes().splitlines(keepends=True))
    return [json.loads(line)["doc_id"] for line in lines if line.endswith(b"\n")]


def asked_doc(body: dict) -> str:
    """The doc a chat request asks about: its question starts with the doc id in brackets."""
    text = next(p["text"] for p in body["messages"][-1]["content"] if p["type"] == "text")
    return text[1 : text.index("]")]


def finished_run(out: Path) -> Path:
    """The one run folder under `out` that holds results."""
    [run] = [p.parent for p in out.glob("*/results.json")]
    return run


@pytest.fixture()
def many_docs(task_dir: Path) -> Path:  # noqa: F811
    """The local tasks with 120 multiple-choice docs, so that kills land between docs."""
    rows = (task_dir / "mc.jsonl").read_text().splitlines()
    many = [json.dumps({**json.loads(r), "id": f"m{i}"}) for i, r in enumerate(rows * 10)]
    (task_dir / "mc.jsonl").write_text("\n".join(many) + "\n")
    return task_dir


def test_run_with_a_local_model_killed_anywhere_resumes_to_the_uninterrupted_run(
    tiny_lm_dir: Path, many_docs: Path, tmp_path: Path
) -> None:
    def command(out: Path, *extra: str) -> list[str]:
        return [*CLI, "run", "--model", "socratic", "--model_args", f"lm={tiny_lm_dir},ocr=false,tags=0",
                "--tasks", "local", "--include_path", str(many_docs), "--output_path", str(out), "--batch_size", "1",
                "--bootstrap_iters", "20", "--no_progress", *extra]  # fmt: skip

    reference, out = tmp_path / "reference", tmp_path / "killed"
    uninterrupted = run_timed(command(reference), lambda: sample_lines(reference), tmp_path / "logs", ONE_THREAD)
    work = sample_lines(reference)
    moments = draw_moments(KILL_SEED, KILL_POINTS, start_s=uninterrupted.first_progress_s, work=work,
                           max_delay_s=0.05)  # fmt: skip
    chain = kill_and_resume(command(out), lambda: command(out, "--resume"), moments, lambda: sample_lines(out),
                            tmp_path / "logs", ONE_THREAD)  # fmt: skip
    normalize = {"manifest.json": RUN_VOLATILE, "results.json": RUN_VOLATILE}
    got, want = (file_bytes(finished_run(o), normalize, LOCKS) for o in (out, reference))
    assert got == want, chain.describe()
    assert chain.mid_work(work) >= 3 and len(chain.children) == KILL_POINTS + 1, chain.describe()


@pytest.fixture()
def many_questions(task_dir: Path) -> Path:  # noqa: F811
    """The local vqa task with 64 docs, each naming itself in its question (so a request names its doc)."""
    rows = [json.loads(r) for r in (task_dir / "vqa.jsonl").read_text().splitlines()]
    many = [{**r, "id": f"{r['id']}-{i}"} for i in range(8) for r in rows]
    many = [{**r, "question": f"[{r['id']}] {r['question']}"} if "question" in r else r for r in many]
    (task_dir / "vqa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in many))
    return task_dir


def test_run_with_an_api_model_killed_anywhere_resumes_without_asking_twice(
    many_questions: Path, tmp_path: Path
) -> None:
    with FakeAPI(echo, delay_s=0.02) as fake:
        def command(out: Path, *extra: str) -> list[str]:
            return [*CLI, "run", "--model", "openai", "--model_args",
                    f"base_url={fake.url},model=m,api_key_env={KEY_ENV},cache_dir=off,backoff=0.01",
                    "--tasks", "local_vqa", "--include_path", str(many_questions), "--output_path", str(out),
                    "--batch_size", "1", "--bootstrap_iters", "20", "--no_progress", *extra]  # fmt: skip

        reference, out = tmp_path / "reference", tmp_path / "killed"
        env = {KEY_ENV: KEY}
        uninterrupted = run_timed(command(reference), lambda: sample_lines(reference), tmp_path / "logs", env)
        work, asked_once = sample_lines(reference), len(fake.calls)
        moments = draw_moments(KILL_SEED, KILL_POINTS, start_s=uninterrupted.first_progress_s, work=work,
                               max_delay_s=0.05)  # fmt: skip
        written: list[tuple[int, set[str]]] = []  # after each child: calls so far, docs with a sample

        def resume() -> list[str]:
            written.append((len(fake.calls), set(sample_ids(out))))
            return command(out, "--resume")

        chain = kill_and_resume(command(out), resume, moments, lambda: sample_lines(out), tmp_path / "logs", env)
        asked = [asked_doc(body) for _, body, _ in fake.calls]
    # One request in flight at a time (--batch_size 1): a kill wastes at most the one it interrupts.
    assert len(asked) - asked_once <= asked_once + chain.kills, chain.describe()
    got, want = (file_bytes(finished_run(o), {"manifest.json": RUN_VOLATILE, "results.json": API_VOLATILE}, LOCKS)
                 for o in (out, reference))  # fmt: skip
    assert got == want, chain.describe()
    for start, done in written:
        again = [doc for doc in asked[start:] if doc in done]
        assert not again, f"asked again for docs already written: {again}\n{chain.describe()}"
    assert chain.mid_work(work) >= 3 and len(chain.children) == KILL_POINTS + 1, chain.describe()
