"""Yes/no answers: the generic rule (MME's and POPE's own readings live with their benchmarks in
`tasks/families/`)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.extract.base import EXTRACTORS, UNPARSED, Extraction
from fastmmeval.extract.rules import fold


@EXTRACTORS.register("yes_no")
def yes_no(text: str, options: Sequence[str] = (), fields: Mapping[str, Any] | None = None) -> Extraction:
    """'yes' or 'no' when that word appears (case-insensitive); when both do, the first
    (rule `yes_no_first`); neither is unparsed."""
    words = re.findall(r"[a-z]+", fold(text).lower())
    found = [w for w in words if w in ("yes", "no")]
    if not found:
        return Extraction(None, UNPARSED)
    rule = "yes_no_single" if len(set(found)) == 1 else "yes_no_first"
    return Extraction(found[0], rule)
