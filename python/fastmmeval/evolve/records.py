"""The records that flow between the evolve pipeline's stages (MMBench-Live's method). Each is a plain
dataclass with a JSON form (`record()` / `from_record`), which is what the stage cache and the
workspace's files hold. The benchmark spec itself (spec.yaml) is in `spec`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastmmeval.live.records import Failure, Record

__all__ = ["Acquired", "Candidate", "Failure", "Generated", "Judgment", "Round", "Step", "Verified"]


@dataclass
class Candidate(Record):
    """An image an `ImageSource` found: `sha` is the sha256 of its sanitized bytes (a blob with
    `suffix`, EXIF stripped), `phash` its perceptual hash (hex). The rest is the metadata the
    acquisition plan's fields keep: where it came from (`source` executor, `url` of the image,
    `page_url`), its `title`, surrounding `context` (alt text, figcaption, nearby text, tags),
    `uploaded_at` (ISO 8601, UTC, when the source says) and the `query` that found it."""

    sha: str
    suffix: str
    source: str
    width: int
    height: int
    phash: str
    url: str = ""
    page_url: str = ""
    title: str = ""
    context: str = ""
    uploaded_at: str = ""
    query: str = ""

    def describe(self) -> str:
        """The candidate's textual context c as the judge and generators are shown it."""
        parts = [("title", self.title), ("context", self.context), ("source", self.page_url or self.url),
                 ("uploaded", self.uploaded_at)]
        return "\n".join(f"{name}: {value}" for name, value in parts if value) or "(no text with this image)"


@dataclass
class Judgment(Record):
    """The feedback controller's judge J(x, c | G_t, B_t) on one candidate: accept or reject, with one to
    three visual rationales."""

    sha: str
    accept: bool
    rationales: list[str] = field(default_factory=list)


@dataclass
class Round(Record):
    """One round m of Algorithm 2: the query q_m, the top-K candidates retrieved for it (shas), the
    acceptance rate rho over them, the rejected candidates' rationales aggregated into the feedback r,
    and the query the update role wrote from it (empty when the round stopped the loop)."""

    query: str
    candidates: list[str]
    rho: float
    feedback: list[str] = field(default_factory=list)
    next_query: str = ""


@dataclass
class Acquired(Record):
    """One atomic task's acquisition: every controller round, the final query q*, the candidates
    retrieved with it and kept (judge accepted, not a duplicate, not a near-copy of the original
    benchmark), and every dropped candidate with its reason."""

    atomic: str
    rounds: list[dict[str, Any]]
    query: str
    kept: list[dict[str, Any]]
    dropped: list[dict[str, str]] = field(default_factory=list)


@dataclass
class Step(Record):
    """One step o_k of a solution plan: a registered tool, its inputs (values are text; "@k" names the
    output of an earlier step k, 1-based) and what the step is for."""

    tool: str
    inputs: dict[str, str]
    purpose: str = ""


@dataclass
class Generated(Record):
    """A QA instance z = (question, options, answer, plan) for one image of one atomic task, and the
    generator role that wrote it (`candidates`: how many generators answered, `chosen_by` how the best
    was picked: 'only', 'compare' or 'rules')."""

    atomic: str
    sha: str
    question: str
    options: list[str]
    answer: str
    plan: list[dict[str, Any]]
    generator: str
    hint: str = ""
    candidates: int = 1
    chosen_by: str = "only"


@dataclass
class Verified(Record):
    """The verification of a generated instance: every tool output z_k (text, in plan order), the
    vision-blind verifier's answer â, and whether the instance is kept (â equals the answer)."""

    generated: dict[str, Any]
    observations: list[str]
    verifier_answer: str
    accepted: bool
    verifier: str = ""
    reason: str = ""
