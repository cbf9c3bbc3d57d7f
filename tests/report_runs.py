"""Synthetic finished run folders for the report tests: results.json, manifest.json and samples in the shapes a
run writes, with a chosen share of correct docs per category."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

CATEGORIES = ("colour", "count", "text")


def write_run(root: Path, rate: float, *, n: int = 300, seed: int = 0, task: str = "vqa", model_args: str = "",
              fingerprint: str = "a" * 16, protocol: dict[str, Any] | None = None,
              response: str = "yes") -> Path:
    """A run of `task` with `n` docs, each correct with probability `rate` (seeded), 1 in 50 failed."""
    rng = np.random.default_rng(seed)
    samples, hits = [], {c: [] for c in CATEGORIES}
    for i in range(n):
        category = CATEGORIES[i % len(CATEGORIES)]
        sample: dict[str, Any] = {"doc_id": f"d{i}", "doc_index": i, "request_kind": "generate",
                                  "prompt": [{"role": "user", "content": f"<image>Question {i}?"}],
                                  "images": [f"img/{i}.png"], "categories": {"category": category}}
        if i % 50 == 49:
            samples.append({**sample, "failed": f"task {task}, doc d{i}: model error: timeout",
                            "failure_kind": "model error"})
            continue
        hit = float(rng.random() < rate)
        hits[category].append(hit)
        samples.append({**sample, "response": response, "target": ["yes"], "extracted": response,
                        "extract_rule": "raw", "metrics": {"exact_match": hit}, "failed": None})
    scored = [h for c in CATEGORIES for h in hits[c]]
    mean = float(np.mean(scored))
    stderr = float(np.std(scored, ddof=1) / np.sqrt(len(scored)))
    breakdown = {c: {"exact_match,none": float(np.mean(h)),
                     "exact_match_stderr,none": float(np.std(h, ddof=1) / np.sqrt(len(h))), "n": len(h)}
                 for c, h in hits.items()}
    entry = {"alias": task, "version": "1", "fingerprint": fingerprint, "output_type": "generate", "mc_mode": None,
             "n": n, "n_scored": len(scored), "n_failed": n - len(scored), "failures": {"model error": n - len(scored)},
             "extract_rules": {"raw": len(scored)}, "headline_metric": "exact_match", "headline_as": "exact_match",
             "metrics": {"exact_match": {"value": mean, "stderr": stderr}}, "exact_match,none": mean,
             "exact_match_stderr,none": stderr, "breakdowns": {"category": breakdown},
             "timing": {"wall_s": 12.5, "prepare_s": 0.5, "model_s": 11.0, "judge_s": 0.0, "score_s": 0.1,
                        "docs_per_s": n / 12.5},
             "tokens": {"prompt": 30 * n, "generated": 2 * n, "prompt_per_s": 30 * n / 11.0,
                        "generated_per_s": 2 * n / 11.0}}
    if protocol is not None:
        entry["protocol"] = protocol
    config = {"model": "socratic", "model_args": model_args, "tasks": [task], "limit": None, "seed": seed}
    (root / "samples").mkdir(parents=True)
    (root / "results.json").write_text(json.dumps({"results": {task: entry}, "config": config, "run_id": root.name,
                                                   "usage": {"calls": n}}))
    (root / "manifest.json").write_text(json.dumps({"run_id": root.name, "config": config, "command": ["fastmmeval"],
                                                    "started": "2026-12-02T10:00:00", "model_fingerprint": "m1",
                                                    "task_fingerprints": {task: fingerprint}}))
    (root / "samples" / f"{task}.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    return root
