"""Judges: a backend + a versioned prompt + a repairing parser; judge metrics read their recorded
verdicts; agreement statistics compare several judges of one run."""

from fastmmeval.judge import benchmark_prompts as _benchmark_prompts  # noqa: F401  (registers the benchmarks' own)
from fastmmeval.judge.agreement import agreement, cohen_kappa, krippendorff_alpha, run_agreement
from fastmmeval.judge.judge import Judge, JudgeSpec, Verdict, judge_specs
from fastmmeval.judge.parse import JudgmentError, parse_object, rating
from fastmmeval.judge.prompts import PROMPTS, JudgeInput, JudgePrompt

__all__ = [
    "PROMPTS", "Judge", "JudgeInput", "JudgePrompt", "JudgeSpec", "JudgmentError", "Verdict", "agreement",
    "cohen_kappa", "judge_specs", "krippendorff_alpha", "parse_object", "rating", "run_agreement",
]  # fmt: skip
