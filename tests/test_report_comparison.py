"""compare_runs over synthetic run folders: planted and null differences, pairing by doc and by cluster,
and protocol mismatches refused (naming the field) or kept with allow_mismatch."""

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fastmmeval.errors import ConfigError
from fastmmeval.report.comparison import compare_runs, flatten, terminal_lines
from fastmmeval.tasks.config import parse_task, protocol_json

TASK_YAML = """\
task: tiny_vqa
dataset: {data_files: docs.jsonl}
split: train
doc_to_messages:
  - role: user
    content:
      - text: "{question}"
target: answer
output_type: generate
extractor: raw
metrics: [exact_match]
generation: {max_new_tokens: %d}
"""


def write_run(
    root: Path,
    task: str,
    docs: dict[str, Any],
    *,
    metric: str = "exact_match",
    fingerprint: str = "f" * 16,
    protocol: dict[str, Any] | None = None,
    failed: tuple[str, ...] = (),
) -> Path:
    """A run folder holding `task`'s samples: each doc id's headline item (`failed` ids failed)."""
    (root / "samples").mkdir(parents=True)
    entry: dict[str, Any] = {"fingerprint": fingerprint, "headline_metric": metric, "headline_as": metric}
    if protocol is not None:
        entry["protocol"] = protocol
    (root / "results.json").write_text(json.dumps({"results": {task: entry}}))
    lines = [{"doc_id": d, "failed": None, "metrics": {metric: v}} for d, v in docs.items()]
    lines += [{"doc_id": d, "failed": "model error", "failure_kind": "model error"} for d in failed]
    (root / "samples" / f"{task}.jsonl").write_text("".join(json.dumps(s) + "\n" for s in lines))
    return root


def correct(n: int, rate: float, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    return {str(i): float(rng.random() < rate) for i in range(n)}


def test_planted_difference_is_significant_and_null_is_not(tmp_path: Path) -> None:
    base = write_run(tmp_path / "a", "vqa", correct(500, 0.60, 1))
    better = write_run(tmp_path / "b", "vqa", correct(500, 0.75, 2))
    same = write_run(tmp_path / "c", "vqa", correct(500, 0.60, 1))
    result = compare_runs([base, better, same])
    planted, null = result["comparisons"]
    assert (planted["test"], planted["verdict"], planted["n_shared"]) == ("mcnemar_chi2", "significant", 500)
    assert planted["p_value"] < 0.01 and planted["scale"] == "0-100"
    assert planted["diff"] == pytest.approx(planted["value_b"] - planted["value_a"]) and planted["diff"] > 8
    assert planted["ci"][0] < planted["diff"] < planted["ci"][1]
    assert (null["verdict"], null["p_value"], null["diff"], null["mismatch"]) == ("not significant", 1.0, 0.0, None)
    json.dumps(result)  # JSON-able as it is
    line = terminal_lines(better, base)[0]
    assert line.startswith("vqa  ") and "McNemar p=<0.001  significant (n=500)" in line and " -> " in line


def test_only_shared_scored_docs_are_paired(tmp_path: Path) -> None:
    base = write_run(tmp_path / "a", "vqa", {"1": 1.0, "2": 0.0, "3": 1.0, "4": 1.0}, failed=("5",))
    other = write_run(tmp_path / "b", "vqa", {"2": 1.0, "3": 1.0, "4": 0.5, "9": 0.0}, failed=("1",))
    entry = compare_runs([base, other], bootstrap_iters=500)["comparisons"][0]
    assert (entry["n_shared"], entry["n_only_baseline"], entry["n_only_other"]) == (3, 1, 1)
    assert (entry["n_failed_baseline"], entry["n_failed_other"]) == (1, 1)
    assert entry["test"] == "paired_bootstrap"  # 0.5 is not a 0/1 outcome
    assert entry["value_a"] == pytest.approx(100 * 2 / 3) and entry["value_b"] == pytest.approx(100 * 2.5 / 3)


def test_circular_eval_is_paired_per_question(tmp_path: Path) -> None:
    # Question 0: both runs all right; 1: the baseline misses a rotation; 2: the other run misses two.
    rows = [(0, True, True), (0, True, True), (1, False, True), (1, True, True), (2, True, False), (2, True, False)]
    a = {str(i): {"group": g, "correct": x} for i, (g, x, _) in enumerate(rows)}
    b = {str(i): {"group": g, "correct": y} for i, (g, _, y) in enumerate(rows)}
    base = write_run(tmp_path / "a", "mmb", a, metric="circular_accuracy")
    other = write_run(tmp_path / "b", "mmb", b, metric="circular_accuracy")
    entry = compare_runs([base, other])["comparisons"][0]
    assert (entry["n_shared"], entry["n_shared_docs"], entry["test"]) == (3, 6, "mcnemar_exact")
    assert (entry["b01"], entry["b10"], entry["diff"]) == (1, 1, 0.0)


def test_untestable_metric_says_why(tmp_path: Path) -> None:
    base = write_run(tmp_path / "a", "cap", {"1": {"x": 1}}, metric="cider")
    other = write_run(tmp_path / "b", "cap", {"1": {"x": 1}}, metric="cider")
    entry = compare_runs([base, other])["comparisons"][0]
    assert entry["verdict"] == "not tested" and "not a mean" in entry["reason"]


def _config(tmp_path: Path, max_new_tokens: int) -> tuple[str, dict[str, Any]]:
    path = tmp_path / f"task_{max_new_tokens}.yaml"
    path.write_text(TASK_YAML % max_new_tokens)
    config = parse_task(path)
    return config.fingerprint(), protocol_json(config.protocol())


def test_protocol_mismatch_is_refused_naming_the_field(tmp_path: Path) -> None:
    (fa, pa), (fb, pb) = _config(tmp_path, 16), _config(tmp_path, 32)
    assert fa != fb
    docs = correct(50, 0.5, 3)
    base = write_run(tmp_path / "a", "tiny_vqa", docs, fingerprint=fa, protocol=pa)
    other = write_run(tmp_path / "b", "tiny_vqa", docs, fingerprint=fb, protocol=pb)
    with pytest.raises(ConfigError, match=rf"tiny_vqa.*{fa} vs {fb}.*differ: generation\.max_new_tokens;") as e:
        compare_runs([base, other])
    assert "\n" not in str(e.value)
    result = compare_runs([base, other], allow_mismatch=True)
    entry = result["comparisons"][0]
    assert entry["mismatch"]["fields"] == ["generation.max_new_tokens"] and entry["verdict"] == "not significant"
    assert "compared anyway" in result["warnings"][0]
    assert "not compared: protocol differs (generation.max_new_tokens)" in terminal_lines(other, base)[0]


def test_runs_without_recorded_protocols_say_they_predate_them(tmp_path: Path) -> None:
    base = write_run(tmp_path / "a", "vqa", {"1": 1.0}, fingerprint="a" * 16)
    other = write_run(tmp_path / "b", "vqa", {"1": 1.0}, fingerprint="b" * 16)
    with pytest.raises(ConfigError, match=r"this run predates recorded protocols"):
        compare_runs([base, other])


def test_flatten_names_dotted_paths() -> None:
    assert flatten({"dataset": {"path": "x", "revision": None}, "doc_to_messages": [{"role": "user"}], "e": {}}) == {
        "dataset.path": "x",
        "dataset.revision": None,
        "doc_to_messages": [{"role": "user"}],
        "e": {},
    }


def test_results_record_the_protocol_the_fingerprint_hashes(tmp_path: Path) -> None:
    from fastmmeval.report.comparison import protocol_mismatch
    from fastmmeval.samples import aggregate
    from fastmmeval.tasks.task import Task

    (tmp_path / "docs.jsonl").write_text(
        "".join(json.dumps({"question": f"q{i}", "answer": "a"}) + "\n" for i in range(3))
    )
    entries = []
    for tokens in (16, 32):
        path = tmp_path / f"task_{tokens}.yaml"
        path.write_text(TASK_YAML % tokens)
        entries.append(json.loads(json.dumps(aggregate(Task(parse_task(path)), []))))
    assert entries[0]["protocol"]["generation"]["max_new_tokens"] == 16
    assert entries[0]["protocol"]["data"]["sha256"] == entries[1]["protocol"]["data"]["sha256"]
    assert protocol_mismatch(entries[0], entries[1])["fields"] == ["generation.max_new_tokens"]
    assert protocol_mismatch(entries[0], entries[0]) is None


def test_runs_with_different_headline_metrics_are_not_tested(tmp_path: Path) -> None:
    base = write_run(tmp_path / "a", "vqa", {"1": 1.0})
    other = write_run(tmp_path / "b", "vqa", {"1": 1.0}, metric="accuracy")
    entry = compare_runs([base, other])["comparisons"][0]
    assert entry["verdict"] == "not tested" and "headline metrics differ" in entry["reason"]
