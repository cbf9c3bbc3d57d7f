"""The page of the docs that lists, per task, what differs from lmms-eval 0.7.3 and why: written
from the task files' `lmms_eval` blocks, so the docs cannot drift from the cards.

`python -m fastmmeval.parity.listing docs/differences.md` rewrites the page."""

from __future__ import annotations

import sys
from pathlib import Path

from fastmmeval.tasks.catalog import Catalog

HEADER = """# Differences from lmms-eval, per task

Generated from the task files' `lmms_eval` blocks (`python -m fastmmeval.parity.listing
docs/differences.md`). A **difference** can change a score or the prompt; each one's id names the
check that `fastmmeval tasks --parity TASK` and `tests/test_parity.py` use to show it on a case
where it does. A **note** says what is the same although it may not look so. Lite subsets
(`<task>_lite`) inherit their task's list and are not repeated here.
"""


def differences_page(catalog: Catalog | None = None) -> str:
    """The markdown page: one section per built-in task that names an lmms-eval task."""
    catalog = catalog or Catalog()
    out = [HEADER]
    for name in catalog.tasks:
        config = catalog.tasks.get(name)
        ref = config.lmms_eval
        if ref is None or config.doc_ids is not None or name.endswith("_lite"):
            continue
        out.append(f"\n## `{name}`\n\nlmms-eval task: `{ref.task}`.\n")
        out += [f"- **{key}**: {text}" for key, text in ref.differences.items()] or ["- No score differences."]
        out += [f"- *note*: {text}" for text in ref.notes]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(differences_page(), encoding="utf-8")
