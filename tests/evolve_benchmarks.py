"""An MMBench dev fixture for the evolve tests: rows in lmms-lab/MMBench's hub schema (config en, the
card's `dataset_info` features, `index` int64) with several atomic tasks (`category`) under their L-2
abilities, two to four options, and CircularEval's rotations as the hub's dev split holds them (rotation
k of question i at index i + k * 1,000,000, its options turned k places and the answer letter moved),
saved where `--data_dir` finds it; and verified items of the same atomic tasks on drawn scenes, as the
evolve stages would hand them to the export.

    rows = save_mmbench_dev(tmp_path / "data", {"ocr": 4, "image_scene": 2})
    accepted = accepted_items(Blobs(tmp_path / "blobs"), {"ocr": 6, "image_scene": 2})   # (Verified, Candidate)
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import datasets
from evolve_images import drawn_scene
from task_fixtures import photo, save_split, task_config

from fastmmeval.evolve.records import Candidate, Generated, Verified
from fastmmeval.live.store import Blobs

S, INT64 = datasets.Value("string"), datasets.Value("int64")
MMBENCH_FEATURES = datasets.Features({
    "index": INT64, "question": S, "hint": S, "answer": S, "A": S, "B": S, "C": S, "D": S, "category": S,
    "image": datasets.Image(), "source": S, "L2-category": S, "comment": S, "split": S,
})  # fmt: skip
# Some of MMBench's atomic tasks and their L-2 abilities.
ABILITIES = {
    "image_scene": "coarse_perception", "ocr": "finegrained_perception (instance-level)",
    "spatial_relationship": "relation_reasoning", "future_prediction": "logic_reasoning",
    "object_localization": "finegrained_perception (single-instance)",
    "attribute_comparison": "finegrained_perception (cross-instance)",
}  # fmt: skip
WORDS = ("red", "green", "blue", "yellow")
HINTS = (None, "nan", "Look at the left half.")


def mmbench_dev_rows(counts: Mapping[str, int], rotations: bool = True) -> list[dict[str, Any]]:
    """`counts[category]` distinct questions per atomic task, numbered in order; question q has 2 + q % 3
    options, answer q % its options, hint HINTS[q % 3], image photo(q). With `rotations`, every question
    also has its other rotations as extra rows."""
    rows = []
    q = 0
    for category, n in counts.items():
        for _ in range(n):
            options = [f"{w} {category} {q}" for w in WORDS[: 2 + q % 3]]
            answer = q % len(options)
            for k in range(len(options) if rotations else 1):
                turned = options[k:] + options[:k]
                rows.append({
                    "index": q + k * 1_000_000, "question": f"Question {q} on {category}?", "hint": HINTS[q % 3],
                    "answer": "ABCD"[(answer - k) % len(options)],
                    **{c: (turned[i] if i < len(turned) else None) for i, c in enumerate("ABCD")},
                    "category": category, "image": photo(q, 48), "source": "MMBench",
                    "L2-category": ABILITIES[category], "comment": None, "split": "dev",
                })  # fmt: skip
            q += 1
    return rows


def save_mmbench_dev(data_dir: Path, counts: Mapping[str, int], task: str = "mmbench_en_dev") -> list[dict[str, Any]]:
    """`mmbench_dev_rows(counts)` saved as `task`'s split under `data_dir`; returns the rows."""
    rows = mmbench_dev_rows(counts)
    save_split(data_dir, task_config(task), rows, MMBENCH_FEATURES)
    return rows


def accepted_items(blobs: Blobs, counts: Mapping[str, int], start: int = 0) -> list[tuple[Verified, Candidate]]:
    """`counts[category]` verified, accepted items per atomic task, each on its own drawn scene (from
    scene `start` on, stored in `blobs`): "How many red shapes are there?" with 2 + k % 3 options, the
    right count among them, a one-step counting plan and its observation."""
    out = []
    k = start
    for category, n in counts.items():
        for _ in range(n):
            scene = drawn_scene(k)
            buf = io.BytesIO()
            scene.image.save(buf, format="PNG")
            sha = blobs.put(buf.getvalue(), ".png")
            red = scene.counts["red"]
            options = [str(red + d) for d in range(2 + k % 3)]
            options = options[k % len(options) :] + options[: k % len(options)]
            answer = "ABCD"[options.index(str(red))]
            plan = [{"tool": "count_colour", "inputs": {"colour": "red"}, "purpose": "count the red shapes"}]
            generated = Generated(
                category,
                sha,
                f"How many red shapes are there in scene {k}?",
                options,
                answer,
                plan,
                generator="gen-a",
                hint="Count every shape." if k % 2 else "",
            )
            verified = Verified(generated.record(), [f"{red} red regions"], answer, True, verifier="blind-v")
            candidate = Candidate(sha, ".png", "folder", *scene.image.size, phash=f"{k:016x}",
                                  url=f"file:///images/scene_{k:03d}.png", title=f"Sign {scene.word.title()}",
                                  uploaded_at="2026-03-15T12:00:00Z", query=f"{category} photos")  # fmt: skip
            out.append((verified, candidate))
            k += 1
    return out
