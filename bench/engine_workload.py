"""The engine bench's workload: short-answer docs cut from real photos, written both as a
fastmmeval task (YAML) and as an lmms-eval task (YAML + utils.py over parquet)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Two tasks: one-word answers and longer descriptions (replies may also end earlier, at EOS).
TASKS = {"bench_vqa_short": 8, "bench_vqa_long": 40}
SHORT_QUESTIONS = [
    "What is this?",
    "What is in the picture?",
    "Name the main object.",
    "What color dominates this image?",
    "Is this photo taken indoors or outdoors?",
    "Answer with one word: what is shown?",
    "How many objects can you see? Answer with a number.",
]
LONG_QUESTIONS = [
    "Describe the photo.",
    "Describe what you see in this image, including the main object, its color and the background.",
    "This picture comes from a collection of sample images used to test image processing software. "
    "Look at it carefully and describe the scene in a short sentence.",
    "Imagine you are explaining this photo to someone who cannot see it. What is the subject, "
    "where is it, and what is happening around it? Keep the answer brief.",
    "Write a caption for this image.",
    "What is the most striking detail of this photo, and why would a photographer have chosen it? "
    "Mention the lighting, the composition and any text or people that appear in the frame.",
]


# ----- data -------------------------------------------------------------------------------------


def photos() -> list[tuple[str, Any]]:
    """(name, HxWx3 uint8 array) for every real photo available offline."""
    import numpy as np
    from PIL import Image

    out = []
    try:
        import skimage.data as sk

        for name in (
            "astronaut",
            "chelsea",
            "coffee",
            "rocket",
            "camera",
            "coins",
            "moon",
            "page",
            "clock",
            "immunohistochemistry",
            "hubble_deep_field",
            "retina",
            "brick",
            "grass",
            "gravel",
            "text",
            "cat",
            "colorwheel",
        ):
            try:
                image = np.asarray(getattr(sk, name)())
            except Exception:  # not bundled with this scikit-image (needs a download)
                continue
            if image.dtype != np.uint8:
                image = (image.astype(float) / max(float(image.max()), 1) * 255).astype(np.uint8)
            if image.ndim == 2:
                image = np.stack([image] * 3, axis=-1)
            out.append((name, image[..., :3]))
    except ImportError:
        pass
    try:
        from sklearn.datasets import load_sample_images

        for path in load_sample_images().filenames:
            out.append((Path(path).stem, np.asarray(Image.open(path).convert("RGB"))))
    except ImportError:
        pass
    try:
        import matplotlib.cbook

        path = matplotlib.cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)
        out.append(("grace_hopper", np.asarray(Image.open(path).convert("RGB"))))
    except (ImportError, OSError):
        pass
    if not out:
        raise SystemExit("no photos found: install scikit-image, scikit-learn or matplotlib")
    return out


def make_docs(n: int, folder: Path, seed: int) -> list[dict[str, Any]]:
    """`n` docs (id, task, image path relative to `folder`, question, answer): a random crop
    (40-100% of each side, sometimes mirrored) of a photo per doc, saved as PNG (lossless, so
    every reader decodes the same pixels)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    pool = photos()
    (folder / "images").mkdir(parents=True, exist_ok=True)
    docs = []
    tasks = list(TASKS)
    for i in range(n):
        name, image = pool[i % len(pool)]
        h, w = image.shape[:2]
        ch, cw = int(h * rng.uniform(0.4, 1.0)), int(w * rng.uniform(0.4, 1.0))
        y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        crop = image[y : y + ch, x : x + cw]
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        rel = f"images/doc_{i:05d}.png"
        Image.fromarray(np.ascontiguousarray(crop)).save(folder / rel)
        task = tasks[i % len(tasks)]
        questions = SHORT_QUESTIONS if task == "bench_vqa_short" else LONG_QUESTIONS
        docs.append(
            {
                "id": f"doc_{i:05d}",
                "task": task,
                "image": rel,
                "image_path": str((folder / rel).resolve()),
                "question": questions[int(rng.integers(len(questions)))],
                "answer": name.replace("_", " "),
            }
        )
    return docs


def write_fastmmeval_tasks(docs: list[dict[str, Any]], data: Path, out: Path) -> None:
    """One fastmmeval task YAML per task, over a jsonl file in `data` (image paths relative to it)."""
    out.mkdir(parents=True, exist_ok=True)
    for task, max_new in TASKS.items():
        with (data / f"{task}.jsonl").open("w") as f:
            for d in docs:
                if d["task"] == task:
                    f.write(json.dumps({k: d[k] for k in ("id", "image", "question", "answer")}) + "\n")
        (out / f"{task}.yaml").write_text(f"""task: {task}
version: 1
description: Short-answer questions over crops of real photos (bench/bench_engine.py).
dataset:
  data_files: {{test: {data.resolve() / (task + ".jsonl")}}}
split: test
doc_id: id
doc_to_messages:
  - role: user
    content:
      - image: image
      - text: "{{question}}"
output_type: generate
target: answer
extractor: raw
metrics: [exact_match]
generation: {{max_new_tokens: {max_new}, temperature: 0}}
""")


LMMS_UTILS = '''"""Hooks of the bench_engine tasks (written by bench/bench_engine.py)."""
from PIL import Image


def doc_to_visual(doc):
    return [Image.open(doc["image_path"]).convert("RGB")]


def doc_to_text(doc, lmms_eval_specific_kwargs=None):
    return doc["question"]


def process_results(doc, results):
    return {"exact_match": float(results[0].strip() == doc["answer"])}
'''


def write_lmms_tasks(docs: list[dict[str, Any]], data: Path, out: Path) -> None:
    """The same tasks for lmms-eval: parquet + YAML + utils.py (no `until`: llava_hf ignores it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    (out / "utils.py").write_text(LMMS_UTILS)
    for task, max_new in TASKS.items():
        rows = [{k: d[k] for k in ("id", "image_path", "question", "answer")} for d in docs if d["task"] == task]
        path = (data / f"{task}.parquet").resolve()
        pq.write_table(pa.Table.from_pylist(rows), path)
        (out / f"{task}.yaml").write_text(f"""task: {task}
dataset_path: parquet
dataset_kwargs:
  data_files:
    test: {path}
test_split: test
output_type: generate_until
doc_to_visual: !function utils.doc_to_visual
doc_to_text: !function utils.doc_to_text
doc_to_target: answer
generation_kwargs:
  max_new_tokens: {max_new}
  temperature: 0
  do_sample: false
process_results: !function utils.process_results
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1
""")


# ----- contenders -------------------------------------------------------------------------------

# Each launcher adds only a timer around the model calls, writes it at exit, and runs the stock CLI.
