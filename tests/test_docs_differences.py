"""The docs' per-task list of differences from lmms-eval is the task files' own."""

from __future__ import annotations

from pathlib import Path

from fastmmeval.parity.listing import differences_page

PAGE = Path(__file__).resolve().parents[1] / "docs" / "differences.md"


def test_the_differences_page_is_written_from_the_task_files() -> None:
    assert PAGE.read_text(encoding="utf-8") == differences_page(), (
        "docs/differences.md is stale: python -m fastmmeval.parity.listing docs/differences.md"
    )


def test_a_task_s_differences_and_notes_are_on_the_page() -> None:
    page = differences_page()
    assert "## `ai2d`" in page and "- **stop_string**: Generation stops" in page
    assert "## `ai2d_lite`" not in page  # lite subsets inherit their task's list
