"""Judge-assisted extraction, after MMBench: the rules first; only when they cannot read the
answer is a judge asked which option it matches (or, for MathVista, what the answer is); when the
judge matches none, the answer is `unparsed` (scored wrong). Never a random letter.

The rules part is an ordinary extractor; `JUDGE_ASSISTED` tells the evaluator which judge prompt
to ask when it returns `unparsed` (the evaluator owns the judge calls, see `fastmmeval.judge`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fastmmeval.extract.base import EXTRACTORS, Extraction
from fastmmeval.extract.options import option_letter

# extractor name -> the judge prompt asked when its rules leave the answer unparsed (families add theirs)
JUDGE_ASSISTED: dict[str, str] = {
    "option_letter_judge": "mmbench_option",
}
# extractor name -> how the judge's reply (text, options, doc fields) becomes the answer (default: as it is);
# benchmark families add theirs (MathVista's normalization)
JUDGE_FINISH: dict[str, Callable[[str, Sequence[str], Mapping[str, Any]], Extraction]] = {}

EXTRACTORS.add("option_letter_judge", option_letter)
