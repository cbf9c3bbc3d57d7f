"""`fastmmeval contam`: a planted-contamination corpus in LLaVA format is indexed and scanned through the CLI,
and exactly the planted benchmark instances are flagged, by the index and by a streaming audit alike."""

from __future__ import annotations

import csv
import io
import json
import re
import unicodedata
from pathlib import Path

import pytest
from PIL import Image

from fastmmeval.cli import main
from fastmmeval.contam.audit.report import html_report
from fastmmeval.contam.audit.scoring import summarize_task
from fastmmeval.errors import FastmmevalError
from fastmmeval.tasks.catalog import Catalog
from fastmmeval.tasks.task import Task

INSTRUCTION = "Answer with the option's letter from the given choices directly."
# The demo's multiple-choice docs as asked with that instruction (demo_objects itself is asked by likelihood,
# its prompt without the instruction).
OBJECTS = "demo_objects_judged"
# Benchmark question texts copied into training conversations (task, doc id) -> where they were copied.
TEXT_COPIES = {
    (OBJECTS, "coffee_utensil"): "human",  # question and options, as a prompt
    (OBJECTS, "china_distance"): "gpt",  # the question quoted inside a longer answer
    ("demo_yesno", "astronaut_helmet_on"): "human",
}
# Benchmark images copied into the training images, each transformed differently.
IMAGE_COPIES = {"rocket": "exact", "astronaut": "resized", "coffee": "jpeg", "china": "cropped"}
# Unrelated real photos (not in the benchmark) that share the training set.
UNRELATED = ["cell.png", "moon.png", "retina.jpg", "ihc.png", "clock_motion.png", "microaneurysms.png"]
TASKS = (OBJECTS, "demo_yesno")


def _transform(image: Image.Image, how: str) -> Image.Image:
    if how == "resized":
        return image.resize((image.width // 2, image.height // 2), Image.Resampling.BILINEAR)
    if how == "jpeg":
        buf = io.BytesIO()
        image.save(buf, format="JPEG", quality=40)
        return Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    if how == "cropped":
        w, h = image.size
        return image.crop((int(0.03 * w), int(0.02 * h), w - int(0.01 * w), h - int(0.03 * h)))
    return image


def _skimage_photo(name: str) -> Image.Image:
    import skimage

    return Image.open(Path(skimage.__file__).parent / "data" / name).convert("RGB")


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A LLaVA-format training set with known copies of demo questions and images, unrelated records, a
    frequent instruction, a near-duplicate question, a missing and a corrupt image; and what must be flagged."""
    root = tmp_path_factory.mktemp("llava")
    (root / "images").mkdir()
    catalog = Catalog()
    docs = {}
    for name in TASKS:
        task = Task(catalog.tasks.get(name))
        for i in range(len(task.rows)):
            row = task.rows[i]
            docs[(name, row["id"])] = (row, task.rows.image_root)

    records = []
    for (name, doc_id), where in TEXT_COPIES.items():
        row, _ = docs[(name, doc_id)]
        question = row["question"]
        if "choices" in row:
            question += "\n" + "\n".join(f"{'ABCD'[k]}. {c}" for k, c in enumerate(row["choices"]))
        turns = [("human", "<image>\nDescribe the picture."), ("gpt", "It shows a scene.")]
        if where == "human":
            turns[0] = ("human", f"<image>\n{question}")
        else:
            turns[1] = ("gpt", f"A good question to ask here would be: {question} Then look closely.")
        records.append({"id": f"textcopy-{doc_id}", "conversations": [{"from": f, "value": v} for f, v in turns]})

    by_image = {}
    for (name, doc_id), (row, image_root) in docs.items():
        by_image.setdefault(Path(row["image"]).stem, []).append((name, doc_id, image_root / row["image"]))
    for stem, how in IMAGE_COPIES.items():
        source = Image.open(by_image[stem][0][2]).convert("RGB")
        file = f"images/copy_{stem}.{'jpg' if how == 'jpeg' else 'png'}"
        copy = _transform(source, how)
        copy.save(root / file, quality=95) if how != "jpeg" else (root / file).write_bytes(_jpeg_bytes(source))
        records.append({
            "id": f"imagecopy-{stem}",
            "image": file,
            "conversations": [
                {"from": "human", "value": "<image>\nWrite a short caption for this photograph."},
                {"from": "gpt", "value": f"A photograph, variant {how}, of everyday things."},
            ],
        })
    for k, name in enumerate(UNRELATED):
        _skimage_photo(name).save(root / "images" / f"other_{k}.png")
        records.append({
            "id": f"unrelated-{k}",
            "image": f"images/other_{k}.png",
            "conversations": [
                {"from": "human", "value": f"<image>\nWhat do you notice in sample number {k} of this collection?"},
                {"from": "gpt", "value": f"Sample {k} looks like a scientific picture taken under a microscope."},
            ],
        })
    for k in range(12):  # the MC instruction, seen 12 > 10 times: frequent, so skipped
        records.append({
            "id": f"instruction-{k}",
            "conversations": [
                {"from": "human", "value": f"Quiz {k}: which planet is largest?\nA. Mars\nB. Jupiter\n{INSTRUCTION}"},
                {"from": "gpt", "value": "B"},
            ],
        })
    records.append({
        "id": "neardup-checkerboard",
        "conversations": [
            {"from": "human", "value": "Is there a checkerboard pattern in the image? Please answer yes or no."},
            {"from": "gpt", "value": "Yes"},
        ],
    })
    (root / "images" / "corrupt.png").write_bytes(b"this is not a png")
    for k, file in enumerate(["images/does_not_exist.jpg", "images/corrupt.png"]):
        records.append({
            "id": f"broken-{k}",
            "image": file,
            "conversations": [{"from": "human", "value": "<image>\nAnything?"}, {"from": "gpt", "value": "No."}],
        })
    shard = root / "llava_train.json"
    shard.write_text(json.dumps(records, indent=1), encoding="utf-8")

    text_flagged = set(TEXT_COPIES)
    image_flagged = {(name, doc_id) for stem in IMAGE_COPIES for name, doc_id, _ in by_image[stem]}
    return {
        "shard": shard,
        "root": root,
        "text": text_flagged,
        "image": image_flagged,
        "all": set(docs),
    }


def _jpeg_bytes(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=40)
    return buf.getvalue()


def _flagged(report: dict, key: str) -> set[tuple[str, str]]:
    """(task, doc id) of the instances whose result has a true (non-empty) `key`."""
    return {(name, e["doc_id"]) for name, t in report["tasks"].items() for e in t["instance_results"] if e.get(key)}


def _check(report: dict, planted: dict, with_ids: bool) -> None:
    assert all(e.get("error") is None for t in report["tasks"].values() for e in t["instance_results"])
    assert _flagged(report, "text_overlap") == planted["text"]
    assert _flagged(report, "image_overlap") == planted["image"]
    assert _flagged(report, "flagged") == planted["text"] | planted["image"]
    objects = report["tasks"][OBJECTS]
    assert objects["frequent_text_ngrams_skipped"] >= 4 * objects["instances"]  # the instruction's 4 windows
    assert objects["text_overlap_share"] == pytest.approx(2 / 31)
    entries = {(n, e["doc_id"]): e for n, t in report["tasks"].items() for e in t["instance_results"]}
    utensil = entries[(OBJECTS, "coffee_utensil")]["text"]
    copied = "What utensil is resting on the saucer?\nA. Chopsticks\nB. A whisk\nC. A spoon\nD. A fork"
    assert utensil["matched"] == [copied]  # the instruction after the options is frequent: not a match
    assert 0 < utensil["fraction"] <= 1
    if with_ids:
        assert utensil["training_ids"] == ["textcopy-coffee_utensil"]
        assert entries[("demo_yesno", "rocket_horse")]["image"]["training_ids"] == ["imagecopy-rocket"]
        near = _flagged(report, "near_duplicates")
        assert ("demo_yesno", "chessboard_checkerboard") in near
        assert near <= planted["text"] | {("demo_yesno", "chessboard_checkerboard")}


def test_index_then_scan_flags_exactly_the_planted_instances(planted: dict, tmp_path: Path) -> None:
    index, out = tmp_path / "index", tmp_path / "report"
    shard = str(planted["shard"])
    assert main(["contam", "index", "--index", str(index), shard, "--memory", "64MB", "--no_progress"]) == 0
    stats = json.loads(Path(index / "manifest.json").read_text())["totals"]
    assert stats["missing_images"] == 2  # the missing file and the corrupt one: counted, not fatal

    assert main(["contam", "scan", "--index", str(index), "--tasks", ",".join(TASKS), "--out", str(out),
                 "--corpus", shard, "--no_progress"]) == 0  # fmt: skip
    report = json.loads((out / "contam_report.json").read_text())
    _check(report, planted, with_ids=True)
    assert report["corpus"]["index"]["missing_images"] == 2
    # Naming the training ids of image matches read the image tokens the index kept, decoding no image.
    assert report["corpus"]["streamed"] == {
        "shards": 1, "images_read": True, "missing_images": 2, "image_cache": {"read": 1, "stale": 0, "absent": 0},
    }
    assert report["settings"]["mode"] == "index"
    decoded = tmp_path / "decoded"
    assert main(["contam", "scan", "--index", str(index), "--tasks", ",".join(TASKS), "--out", str(decoded),
                 "--corpus", shard, "--no_image_cache", "--no_progress"]) == 0  # fmt: skip
    again = json.loads((decoded / "contam_report.json").read_text())
    assert again["tasks"] == report["tasks"]
    assert again["corpus"]["streamed"] == {"shards": 1, "images_read": True, "missing_images": 2}

    # The first four yes/no questions share no text and no image with the corpus: naming training ids streams
    # the corpus again without decoding its images.
    few = tmp_path / "few"
    assert main(["contam", "scan", "--index", str(index), "--tasks", "demo_yesno", "--limit", "4", "--out", str(few),
                 "--corpus", shard, "--no_progress"]) == 0  # fmt: skip
    report = json.loads((few / "contam_report.json").read_text())
    assert _flagged(report, "flagged") == set()
    assert report["corpus"]["streamed"] == {"shards": 1, "images_read": False, "missing_images": None}

    rows = list(csv.DictReader((out / "contam_instances.csv").read_text().splitlines()))
    assert len(rows) == len(planted["all"])
    assert {(r["task"], r["doc_id"]) for r in rows if r["flagged"] == "True"} == planted["text"] | planted["image"]
    summary = list(csv.DictReader((out / "contam_summary.csv").read_text().splitlines()))
    assert [r["task"] for r in summary] == list(TASKS)
    assert (out / "contam_overlap.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (out / "contam_report.html").read_text()
    assert "<mark>What utensil is resting on the saucer?\nA. Chopsticks" in page  # the copied span, marked
    assert "textcopy-coffee_utensil, imagecopy-coffee" in page and page.count("<h2>demo_") == 2
    # The top image matches show both sides: the benchmark image and the training image it matched.
    figures = re.findall(r'<figure><img alt="([^"]*)" src="data:image/jpeg;base64,[A-Za-z0-9+/=]+">', page)
    assert "benchmark image" in figures and "training imagecopy-china" in figures
    full = json.loads((out / "contam_report.json").read_text())
    assert figures.count("benchmark image") == sum(
        1 for t in full["tasks"].values() for e in t["top_examples"] if e["image"]["overlapping_images"]
    )


def test_streaming_audit_without_index_flags_the_same(planted: dict, tmp_path: Path) -> None:
    out = tmp_path / "stream"
    # One decoding thread and batches of three images: the same findings as the defaults give.
    assert main(["contam", "scan", "--tasks", ",".join(TASKS), "--out", str(out), "--corpus", str(planted["shard"]),
                 "--decode_threads", "1", "--image_batch", "3", "--no_progress"]) == 0  # fmt: skip
    report = json.loads((out / "contam_report.json").read_text())
    _check(report, planted, with_ids=True)
    assert report["settings"]["mode"] == "stream"
    assert report["corpus"]["streamed"]["missing_images"] == 2


def test_scan_index_only_reports_counts_without_training_ids(planted: dict, tmp_path: Path) -> None:
    index = tmp_path / "index"
    assert main(["contam", "index", "--index", str(index), str(planted["shard"]), "--no_progress"]) == 0
    out = tmp_path / "report"
    assert main(["contam", "scan", "--index", str(index), "--tasks", ",".join(TASKS), "--out", str(out),
                 "--no_progress"]) == 0  # fmt: skip
    report = json.loads((out / "contam_report.json").read_text())
    _check(report, planted, with_ids=False)
    assert report["tasks"]["demo_yesno"]["near_duplicate_share"] is None  # needs --corpus


def test_add_compact_stats_and_tokenizer_checks(planted: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    index = tmp_path / "index"
    shard = str(planted["shard"])
    assert main(["contam", "index", "--index", str(index), shard, "--image_tokenizer", "none", "--no_progress"]) == 0
    again = tmp_path / "again.json"  # a copy: the same shard again would be skipped
    again.write_bytes(planted["shard"].read_bytes())
    assert main(["contam", "add", "--index", str(index), str(again), "--no_progress"]) == 0  # a second generation
    capsys.readouterr()
    assert main(["contam", "stats", "--index", str(index)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["generations"] == 2 and stats["missing_images"] == 0  # text only: images are never opened
    assert stats["meta"]["text_tokenizer"] == {
        "spec": "words", "fingerprint": "words-v1", "unicode": unicodedata.unidata_version,
    }
    assert main(["contam", "compact", "--index", str(index)]) == 0
    capsys.readouterr()
    assert main(["contam", "stats", "--index", str(index)]) == 0
    compacted = json.loads(capsys.readouterr().out)
    assert compacted["generations"] == 1
    assert {k: compacted[k] for k in ("docs", "distinct_ngrams")} == {k: stats[k] for k in ("docs", "distinct_ngrams")}
    # Image n-grams were not indexed: asking for them is refused with a one-line error.
    out = tmp_path / "report"
    args = ["contam", "scan", "--index", str(index), "--tasks", "demo_yesno", "--out", str(out), "--no_progress"]
    assert main([*args, "--image_tokenizer", "offline"]) == 1
    assert "built without image tokens" in capsys.readouterr().err
    assert main(args) == 0
    report = json.loads((out / "contam_report.json").read_text())
    assert _flagged(report, "text_overlap") == {("demo_yesno", "astronaut_helmet_on")}
    assert _flagged(report, "image_overlap") == set()
    # An index whose words were split under another Unicode version: adding to it is refused (it would mix
    # two splits), a scan goes on with a warning naming both versions.
    manifest = json.loads((index / "manifest.json").read_text())
    manifest["meta"]["text_tokenizer"]["unicode"] = "9.0.0"
    (index / "manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    assert main(["contam", "add", "--index", str(index), shard, "--no_progress"]) == 1
    err = capsys.readouterr().err
    assert f"split under Unicode 9.0.0, this Python's is {unicodedata.unidata_version}" in err and "contam add" in err
    assert main(args) == 0
    assert "warning: the index's words were split under Unicode 9.0.0" in capsys.readouterr().err


def test_an_index_built_with_offline_version_1_scans_with_it(
    planted: dict, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    # An index built before version 2 records `offline` with fingerprint offline-v1: scans pick version 1.
    index, out = tmp_path / "index", tmp_path / "report"
    shard = str(planted["shard"])
    built = main(["contam", "index", "--index", str(index), shard, "--image_tokenizer", "offline:1", "--no_progress"])
    assert built == 0
    manifest = json.loads((index / "manifest.json").read_text())
    assert manifest["meta"]["image_tokenizer"] == {"spec": "offline:1", "fingerprint": "offline-v1"}
    manifest["meta"]["image_tokenizer"]["spec"] = "offline"
    (index / "manifest.json").write_text(json.dumps(manifest))
    args = ["contam", "scan", "--index", str(index), "--tasks", ",".join(TASKS), "--out", str(out), "--no_progress"]
    assert main(args) == 0
    report = json.loads((out / "contam_report.json").read_text())
    assert report["settings"]["image_tokenizer"]["fingerprint"] == "offline-v1"
    _check(report, planted, with_ids=False)
    capsys.readouterr()
    assert main([*args, "--image_tokenizer", "offline"]) == 1
    assert "fingerprint offline-v2 differs from the index's offline-v1" in capsys.readouterr().err


def _local_task(folder: Path, name: str, rows: list[dict]) -> None:
    """A task file `name` in `folder` over `rows` (id, image, question, answer): the image, then the question."""
    (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / f"{name}.yaml").write_text(
        f"task: {name}\ndataset:\n  data_files: {{test: {name}.jsonl}}\nsplit: test\ndoc_id: id\n"
        "doc_to_messages:\n  - role: user\n    content:\n      - image: image\n      - text: '{question}'\n"
        "output_type: generate\ntarget: answer\nextractor: raw\nmetrics: [exact_match]\n"
    )


def test_unreadable_benchmark_docs_are_reported_not_fatal(tmp_path: Path) -> None:
    """A task from --include_path whose second doc's image is missing: that instance carries the reason."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    Image.new("RGB", (40, 30), (250, 200, 0)).save(tasks / "yellow.png")
    rows = [{"id": "q1", "image": "yellow.png", "question": "Which colour fills this whole picture frame today?",
             "answer": "yellow"},
            {"id": "q2", "image": "gone.png", "question": "What is shown?", "answer": "nothing"}]  # fmt: skip
    _local_task(tasks, "local_colours", rows)
    corpus = tmp_path / "train.jsonl"
    record = {"id": "t1", "text": "Which colour fills this whole picture frame today? Yellow."}
    corpus.write_text(json.dumps(record) + "\n")
    out = tmp_path / "out"
    assert main(["contam", "scan", "--include_path", str(tasks), "--tasks", "local_colours", "--corpus", str(corpus),
                 "--image_tokenizer", "none", "--out", str(out), "--no_progress"]) == 0  # fmt: skip
    full = json.loads((out / "contam_report.json").read_text())
    assert full["corpus"]["streamed"] == {"shards": 1, "images_read": False, "missing_images": None}  # text only
    report = full["tasks"]["local_colours"]
    assert report["errors"] == 1 and report["flagged"] == 1
    q1, q2 = report["instance_results"]
    assert q1["text"]["training_ids"] == ["t1"] and q1["text"]["fraction"] == 1.0
    assert "gone.png" in q2["error"]


def test_images_without_low_frequency_content_are_not_evidence(tmp_path: Path) -> None:
    # Two unrelated flat images tokenize to neutral tokens only, whose windows are alike: a scan does not
    # look those up, so a flat benchmark image is not flagged against a flat training image; a copy still is.
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    Image.new("RGB", (64, 48), (128, 128, 128)).save(tasks / "grey.png")
    _skimage_photo("rocket.jpg").save(tasks / "rocket.png")
    rows = [{"id": "flat", "image": "grey.png", "question": "Is this grey?", "answer": "yes"},
            {"id": "copy", "image": "rocket.png", "question": "Is this a rocket?", "answer": "yes"}]  # fmt: skip
    _local_task(tasks, "local_flat", rows)
    Image.new("RGB", (30, 30), (250, 250, 250)).save(tmp_path / "white.png")
    _transform(_skimage_photo("rocket.jpg"), "resized").save(tmp_path / "rocket_copy.jpg", quality=40)
    corpus = tmp_path / "train.json"
    corpus.write_text(json.dumps([
        {"id": "t-white", "image": "white.png", "conversations": [{"from": "human", "value": "<image> A wall."}]},
        {"id": "t-rocket", "image": "rocket_copy.jpg", "conversations": [{"from": "human", "value": "<image> Go."}]},
    ]))  # fmt: skip
    out = tmp_path / "out"
    assert main(["contam", "scan", "--include_path", str(tasks), "--tasks", "local_flat", "--corpus", str(corpus),
                 "--out", str(out), "--no_progress"]) == 0  # fmt: skip
    flat, copy = json.loads((out / "contam_report.json").read_text())["tasks"]["local_flat"]["instance_results"]
    assert flat["image"]["ngrams"] == 0 and not flat["image_overlap"]
    assert copy["image_overlap"] and copy["image"]["training_ids"] == ["t-rocket"]


def test_memory_sizes() -> None:
    from fastmmeval.contam.cli import parse_memory

    sizes = [parse_memory(s) for s in ("1GB", "512MB", "2GiB", "1.5g", "4096")]
    assert sizes == [1 << 30, 512 << 20, 2 << 30, 3 << 29, 4096]
    with pytest.raises(FastmmevalError, match="--memory"):
        parse_memory("lots")


def test_html_report_escapes_what_the_data_holds() -> None:
    # Task data is untrusted: a question or an id holding markup is shown as text, never run.
    entry = {
        "doc_id": "<b>d1</b>", "flagged": True, "text_overlap": True, "image_overlap": False,
        "question": "Is <script>alert(1)</script> safe?",
        "text": {"ngrams": 9, "frequent": 0, "present": 2, "fraction": 2 / 9, "matched": ["<script>alert(1)</script>"],
                 "training_ids": ["<i>t</i>"]},
        "image": {"ngrams": 0, "frequent": 0, "present": 0, "fraction": None, "images": 0, "overlapping_images": 0},
    }  # fmt: skip
    task = summarize_task("<u>task</u>", [entry], with_near_dup=False)
    report = {"tasks": {"x": {**task, "instance_results": [entry]}}, "corpus": {}, "settings": {"index": "<idx>"}}
    page = html_report(report, b"png").decode()
    assert "<script>" not in page and "<b>" not in page and "<i>" not in page and "<u>" not in page
    assert "Is <mark>&lt;script&gt;alert(1)&lt;/script&gt;</mark> safe?" in page
    assert "&lt;b&gt;d1&lt;/b&gt;" in page and "&lt;idx&gt;" in page
