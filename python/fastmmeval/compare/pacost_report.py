"""What PaCoST records: each doc's pair of confidences (original and paraphrase), each doc that failed and
where, and per task and per category the paired statistics of Δ = c_orig - c_para (pacost.json)."""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastmmeval.compare.stats import PairedStats, paired_stats

CONTINUATIONS = (" Yes", " No")
STAGES = ("doc", "paraphrase", "numbers", "answer", "confidence")  # where a pair can fail, in order
REPORT_FILE = "pacost.json"
CACHE_FILE = "cache.sqlite"
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def missing_numbers(original: str, paraphrase: str) -> list[str]:
    """The numbers `original` writes in digits (e.g. 3, 2.5, 1,000) that `paraphrase` writes fewer times, in
    the order they first appear."""
    need, have = Counter(_NUMBER.findall(original)), Counter(_NUMBER.findall(paraphrase))
    return [n for n in need if need[n] > have[n]]


def confidence(logprob_yes: float, logprob_no: float) -> float:
    """P(yes) / (P(yes) + P(no)) from the two continuations' log-probabilities."""
    top = max(logprob_yes, logprob_no)
    yes, no = math.exp(logprob_yes - top), math.exp(logprob_no - top)
    return yes / (yes + no)


@dataclass(frozen=True)
class Pair:
    """One doc asked in both wordings: the model's answers and its confidence in each."""

    doc_id: str
    categories: dict[str, str]
    question: str
    paraphrase: str
    answer_orig: str
    answer_para: str
    c_orig: float
    c_para: float

    @property
    def delta(self) -> float:
        """Δ = c_orig - c_para."""
        return self.c_orig - self.c_para

    def to_json(self) -> dict[str, Any]:
        """The pair with its Δ."""
        return {**dataclasses.asdict(self), "delta": self.delta}


@dataclass(frozen=True)
class Failure:
    """A doc left out: the stage that failed (one of STAGES) and why."""

    doc_id: str
    stage: str
    reason: str
    question: str | None = None
    paraphrase: str | None = None


@dataclass
class TaskPacost:
    """One task's pairs and failures, and the statistics of their Δ."""

    task: str
    docs: int
    pairs: list[Pair] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)

    @property
    def stats(self) -> PairedStats:
        """The one-sided paired test of E[Δ] > 0 over the task's pairs."""
        return stats_of(self.pairs)

    def categories(self) -> dict[str, dict[str, PairedStats]]:
        """The same per category: breakdown field -> category -> statistics."""
        groups: dict[str, dict[str, list[Pair]]] = {}
        for pair in self.pairs:
            for name, value in pair.categories.items():
                groups.setdefault(name, {}).setdefault(value, []).append(pair)
        return {name: {value: stats_of(pairs) for value, pairs in sorted(by.items())} for name, by in groups.items()}

    def failed(self) -> dict[str, int]:
        """How many docs failed at each stage."""
        counts = Counter(f.stage for f in self.failures)
        return {stage: counts[stage] for stage in STAGES if counts[stage]}

    def to_json(self) -> dict[str, Any]:
        """The task's section of pacost.json."""
        return {
            "docs": self.docs,
            "failed": self.failed(),
            "delta": self.stats.to_json(),
            "categories": {name: {value: s.to_json() for value, s in by.items()}
                           for name, by in self.categories().items()},
            "pairs": [p.to_json() for p in self.pairs],
            "failures": [dataclasses.asdict(f) for f in self.failures],
        }


@dataclass
class PacostReport:
    """What `pacost` found, as written to `path` (pacost.json)."""

    path: Path
    model: str
    paraphraser: str
    tasks: dict[str, TaskPacost]

    def summary(self) -> str:
        """One line per task: pairs, failures and the statistics of Δ."""
        lines = [f"PaCoST of {self.model} (paraphrases by {self.paraphraser}), Δ = c_orig - c_para:"]
        for name, result in self.tasks.items():
            s, failed = result.stats, result.failed()
            left_out = ", ".join(f"{stage} {n}" for stage, n in failed.items()) or "none"
            lines.append(f"  {name}: {s.n} pairs of {result.docs} docs (left out: {left_out}); mean Δ {shown(s.mean)}, "
                         f"std {shown(s.std)}, t {shown(s.t)}, p (one-sided) {shown(s.p)}, Cohen's d {shown(s.d)}")
        lines.append(f"written to {self.path}")
        return "\n".join(lines)



def stats_of(pairs: list[Pair]) -> PairedStats:
    """The one-sided paired test of E[Δ] > 0 over `pairs`."""
    return paired_stats([p.c_orig for p in pairs], [p.c_para for p in pairs], "greater")


def shown(value: float | None) -> str:
    """A statistic as the summary prints it."""
    return "n/a" if value is None else f"{value:.4g}"
