"""A text-only task pair and the scripted model, for fast end-to-end runs of the CLI (no weights, no images)."""

from __future__ import annotations

import json
from pathlib import Path

import judge_fixtures  # noqa: F401  (registers scripted_student)

TASK = """\
task: {name}
group: qa
dataset: {{data_files: {{test: qa.jsonl}}}}
split: test
doc_id: id
doc_to_messages: [{{role: user, content: [{{text: "{{{field}}}"}}]}}]
target: answer
output_type: generate
extractor: first_word
metrics: [exact_match]
"""


def write_tasks(folder: Path, n_docs: int = 8, field: str = "question") -> Path:
    """Tasks qa_a and qa_b (group qa) over `n_docs` questions; their prompt reads `field` (a name the rows
    lack fails every doc, like a template typo)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"id": f"d{i}", "question": f"What is {i}?", "answer": str(i)} for i in range(n_docs)]
    (folder / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name in ("qa_a", "qa_b"):
        (folder / f"{name}.yaml").write_text(TASK.format(name=name, field=field))
    return folder


def run_argv(tasks: Path, out: Path, *extra: str) -> list[str]:
    """`fastmmeval run` of group qa with the scripted model into `out`."""
    return ["run", "--model", "scripted_student", "--model_args", "default=3", "--tasks", "qa",
            "--include_path", str(tasks), "--output_path", str(out), "--no_progress", "--bootstrap_iters", "0",
            *extra]
