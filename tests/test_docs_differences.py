"""The docs' per-task list of differences from lmms-eval is the task files' own: the mkdocs hook
writes it from them before each build."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastmmeval.parity.listing import differences_page

HOOK = Path(__file__).resolve().parents[1] / "docs" / "hooks" / "differences.py"


def test_the_docs_hook_writes_the_page_from_the_task_files(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("differences_hook", HOOK)
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    hook.on_pre_build({"docs_dir": str(tmp_path)})
    assert (tmp_path / "differences.md").read_text(encoding="utf-8") == differences_page()


def test_a_task_s_differences_and_notes_are_on_the_page() -> None:
    page = differences_page()
    assert "## `ai2d`" in page and "- **stop_string**: Generation stops" in page
    assert "## `ai2d_lite`" not in page  # lite subsets inherit their task's list
