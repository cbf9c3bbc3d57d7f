"""Kill -9 at seeded random moments, then resume: `run` (a local and an API model), `contam index` and
`contam add`, `lite select` end with the outputs of an uninterrupted run, byte for byte where the format
allows. Each flow is one chain of children (kill, resume, kill, ..., finish), KILL_POINTS kills long."""

from __future__ import annotations

import json
import random
import re
import shutil
import signal
from pathlib import Path

import pytest
from api_fixtures import FakeAPI
from kill_helpers import (
    CLI,
    ENOUGH_KILLS,
    KILL_POINTS,
    KILL_SEED,
    draw_moments,
    file_bytes,
    json_without,
    kill_and_resume,
    run_timed,
)
from PIL import Image
from test_api_backends import KEY, KEY_ENV, echo
from test_evaluate import task_dir  # noqa: F401  (a fixture: two small local tasks over real photos)

from fastmmeval.cli import main

ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # children share two cores with the test
# `git` too: a commit made while the suite runs moves HEAD between the uninterrupted run and the resumed one.
# Timing and token counts measure the process that finished the run, not the run's outputs.
RUN_VOLATILE = json_without("run_id", "started", "finished", "resumed", "command", "git", "flags",
                            per_task=("timing", "tokens"))
# A killed child's API calls are in no results.json: usage counts those of the children that wrote it.
API_VOLATILE = json_without("run_id", "usage", per_task=("timing", "tokens"))
# Who holds (or last held) a folder, and the report drawn from results.json (its timings too): not outputs.
LOCKS = frozenset({".lock", "report.html"})


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
    """The one run folder under `out`, holding results: a new run's folder appears with its manifest once the
    model has loaded, so a run killed while loading leaves none (one killed in the milliseconds between the two
    would leave a folder holding its lock file only)."""
    [run] = [p.parent for p in out.glob("*/results.json")]
    others = [p for p in out.iterdir() if p != run]
    assert len(others) <= 1 and all(sorted(q.name for q in p.iterdir()) in ([], [".lock"]) for p in others), others
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
    assert chain.mid_work(work) >= ENOUGH_KILLS and len(chain.children) == KILL_POINTS + 1, chain.describe()


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
    assert chain.mid_work(work) >= ENOUGH_KILLS and len(chain.children) == KILL_POINTS + 1, chain.describe()


@pytest.fixture()
def corpus(tmp_path: Path) -> list[Path]:
    """Three jsonl shards of 3,000 records of random words, one record in ten with an image."""
    root = tmp_path / "corpus"
    (root / "images").mkdir(parents=True)
    for i in range(6):
        Image.new("RGB", (48, 48), (40 * i, 255 - 30 * i, 7 * i)).save(root / "images" / f"im{i}.png")
    rng = random.Random(0)
    words = [f"w{i}" for i in range(3000)]
    shards = []
    for s in range(3):
        rows = [{"id": f"s{s}-{j}", "text": " ".join(rng.choices(words, k=rng.randrange(20, 80))),
                 **({"image": f"images/im{j % 6}.png"} if j % 10 == 0 else {})} for j in range(3000)]  # fmt: skip
        shards.append(root / f"shard{s}.jsonl")
        shards[-1].write_text("".join(json.dumps(r) + "\n" for r in rows))
    return shards


def published(index: Path) -> int:
    """The generations an index's manifest lists (0 before it has one)."""
    manifest = index / "manifest.json"
    return len(json.loads(manifest.read_text())["generations"]) if manifest.exists() else 0


def contam_build(command: str, index: Path, shards: list[Path]) -> list[str]:
    """`contam index` or `contam add` of these shards (an index build spills: a small memory budget)."""
    flags = ["--memory", "2MB", "--threads", "1"] if command == "index" else []
    return [*CLI, "contam", command, "--index", str(index), *map(str, shards), *flags, "--no_progress"]


def index_bytes(index: Path) -> dict[str, bytes]:
    """An index's files, the times its manifest says its shards were added left out."""
    return file_bytes(index, {"manifest.json": manifest_without_times}, LOCKS)


def manifest_without_times(data: bytes) -> bytes:
    doc = json.loads(data)
    for gen in doc["generations"]:
        for shard in gen.get("shards", []):
            del shard["added"]
    return json.dumps(doc, sort_keys=True).encode()


def test_contam_index_killed_anywhere_ends_with_the_uninterrupted_index(corpus: list[Path], tmp_path: Path) -> None:
    # A killed `contam index` has published nothing and is run again. Once its generation is published the
    # index is built (running it again is refused: the folder holds an index): the moments left go to a new
    # chain in a fresh folder, until every one is spent.
    reference = tmp_path / "reference"
    uninterrupted = run_timed(contam_build("index", reference, corpus[:2]), lambda: published(reference),
                              tmp_path / "logs")  # fmt: skip
    left = draw_moments(KILL_SEED, KILL_POINTS, start_s=uninterrupted.first_progress_s)  # before it publishes
    kills = 0
    while left:
        index = tmp_path / f"killed{KILL_POINTS - len(left)}"
        build = contam_build("index", index, corpus[:2])
        chain = kill_and_resume(build, lambda i=index, b=build: None if published(i) else b, left,
                                lambda i=index: published(i), tmp_path / "logs")  # fmt: skip
        assert index_bytes(index) == index_bytes(reference), chain.describe()
        left, kills = left[chain.used :], kills + chain.kills
    assert kills >= ENOUGH_KILLS


def test_contam_add_killed_anywhere_and_run_again_ends_with_the_uninterrupted_add(
    corpus: list[Path], tmp_path: Path
) -> None:
    # The third shard is added to an index of the first two; after every kill the same `contam add` runs again.
    # About half the moments kill just after the new manifest is in place, before the process exits: the add
    # is then complete, and its rerun finds the shard in the index and skips it. Each such kill ends a user's
    # session (kills, reruns, a rerun to its end) in a fresh copy of the index; the next one starts another.
    base = tmp_path / "base"
    assert main(["contam", "index", "--index", str(base), *map(str, corpus[:2]), "--memory", "2MB",
                 "--threads", "1", "--no_progress"]) == 0  # fmt: skip

    def copy(name: str) -> tuple[Path, list[str]]:
        shutil.copytree(base, tmp_path / name)
        return tmp_path / name, contam_build("add", tmp_path / name, corpus[2:])

    reference, build = copy("reference")
    uninterrupted = run_timed(build, lambda: published(reference) - 1, tmp_path / "logs")
    moments = draw_moments(KILL_SEED, KILL_POINTS, start_s=uninterrupted.first_progress_s, work=2)
    sessions = [[]]
    for moment in moments:
        sessions[-1].append(moment)
        if moment.after:  # after publishing, with no delay
            sessions.append([])
    kills = after_publishing = 0
    for s, session in enumerate(filter(None, sessions)):
        index, build = copy(f"killed{s}")
        chain = kill_and_resume(build, lambda b=build: b, session, lambda i=index: published(i) - 1,
                                tmp_path / "logs")  # fmt: skip
        assert index_bytes(index) == index_bytes(reference), chain.describe()
        publisher = next(c for c in chain.children if c.progress)
        kills, after_publishing = kills + chain.kills, after_publishing + (publisher.returncode == -signal.SIGKILL)
    assert kills >= ENOUGH_KILLS and after_publishing >= 1


KILLED_WRITE = ".{}.0123456789ab.tmp"  # what an atomic write of {} killed before its rename leaves


def test_a_resumed_run_removes_what_killed_writes_of_its_json_files_left(
    task_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    with FakeAPI(echo) as fake:
        args = ["run", "--model", "openai", "--model_args", f"base_url={fake.url},model=m,api_key_env={KEY_ENV}",
                "--tasks", "local_vqa", "--include_path", str(task_dir), "--output_path", str(tmp_path / "out"),
                "--no_progress"]  # fmt: skip
        assert main(args) == 0
        run = finished_run(tmp_path / "out")
        for name in ("manifest.json", "results.json"):
            (run / KILLED_WRITE.format(name)).write_text('{"half": ')
        assert main([*args, "--resume"]) == 0
    assert sorted(p.name for p in run.iterdir()) == [".lock", "manifest.json", "report.html", "results.json", "samples"]


def test_an_add_removes_what_a_publish_killed_in_its_write_left(corpus: list[Path], tmp_path: Path) -> None:
    index = tmp_path / "index"
    assert main(["contam", "index", "--index", str(index), str(corpus[0]), "--no_progress"]) == 0
    (index / KILLED_WRITE.format("manifest.json")).write_text('{"format": "fastmmeval.ngram-index", ')
    assert main(["contam", "add", "--index", str(index), str(corpus[1]), "--no_progress"]) == 0
    assert sorted(p.name for p in index.iterdir()) == [".lock", "image_tokens", "manifest.json", "seg"]


def test_lite_select_killed_anywhere_ends_with_the_uninterrupted_selection(tmp_path: Path) -> None:
    # A cache of its own, so that the first children build the demo datasets (and may be killed doing it).
    def select(out: Path) -> list[str]:
        return [*CLI, "lite", "select", "--tasks", "demo", "--size", "10", "--method", "random", "--out", str(out),
                "--no_progress"]  # fmt: skip

    def chosen(out: Path) -> int:
        return len(list(out.glob("*.json")))

    reference, out = tmp_path / "reference", tmp_path / "killed"
    own_cache = {"FASTMMEVAL_CACHE": str(tmp_path / "reference-cache")}
    uninterrupted = run_timed(select(reference), lambda: chosen(reference), tmp_path / "logs", own_cache)
    moments = draw_moments(KILL_SEED, KILL_POINTS, start_s=uninterrupted.first_progress_s, work=chosen(reference),
                           max_delay_s=0.05)  # fmt: skip
    own_cache = {"FASTMMEVAL_CACHE": str(tmp_path / "cache")}
    chain = kill_and_resume(select(out), lambda: select(out), moments, lambda: chosen(out), tmp_path / "logs",
                            own_cache)  # fmt: skip
    assert chain.used == KILL_POINTS and chain.kills >= ENOUGH_KILLS, chain.describe()
    selection = {name: json_without("created") for name in (p.name for p in reference.glob("*.json"))}
    # Known litter (no lock tells a dead writer's temporaries from a live one's): a write or a demo build
    # killed before its rename leaves its temporary file or folder.
    for got, want in ((file_bytes(out, selection), file_bytes(reference, selection)),
                      (file_bytes(tmp_path / "cache"), file_bytes(tmp_path / "reference-cache"))):  # fmt: skip
        assert without_litter(got) == want, chain.describe()


KILLED_TEMP = re.compile(r"(^|/)\.[^/]+\.[0-9a-f]{12}\.tmp$|^datasets/\.demo\.tmp-[^/]+/")


def without_litter(files: dict[str, bytes]) -> dict[str, bytes]:
    """The files but the temporaries a killed write or demo build leaves."""
    return {name: data for name, data in files.items() if not KILLED_TEMP.search(name)}


def test_an_index_killed_before_its_first_manifest_is_built_again(corpus: list[Path], tmp_path: Path) -> None:
    index = tmp_path / "index"
    (index / "seg").mkdir(parents=True)
    (index / KILLED_WRITE.format("manifest.json")).write_text('{"format": ')
    assert main(["contam", "index", "--index", str(index), str(corpus[0]), "--no_progress"]) == 0
    assert sorted(p.name for p in index.iterdir()) == [".lock", "image_tokens", "manifest.json", "seg"]
