"""mkdocs hook: docs/differences.md is written from the task files before each build, so the page
cannot drift from the cards."""

from pathlib import Path
from typing import Any

from fastmmeval.parity.listing import differences_page


def on_pre_build(config: Any) -> None:
    """Write the per-task list of differences from lmms-eval into the docs folder."""
    (Path(config["docs_dir"]) / "differences.md").write_text(differences_page(), encoding="utf-8")
