"""The records that flow between the live pipeline's stages. Each is a plain dataclass with a JSON
form (`record()` / `from_record`), which is what the stage cache and the month's files hold."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fastmmeval.errors import ConfigError
from fastmmeval.live.store import content_key
from fastmmeval.tasks.families.live_bench import SUBTASKS

__all__ = ["SUBTASKS", "Capture", "Record", "Draft", "Failure", "Item", "PageInfo", "Score", "Source", "check_month"]

_MONTH = re.compile(r"\d{4}-(0[1-9]|1[0-2])")


def check_month(month: str) -> str:
    """`month` if it is YYYY-MM (a LiveBench month's name), else a ConfigError."""
    if not _MONTH.fullmatch(month):
        raise ConfigError(f"month {month!r}: expected YYYY-MM (e.g. 2026-12)")
    return month

R = TypeVar("R")


class Record:
    def record(self) -> dict[str, Any]:
        """The JSON-able form."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_record(cls: type[R], data: dict[str, Any]) -> R:
        """Back from `record()`."""
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class Source(Record):
    """A site to capture: its name, URL, category (news, forum, finance, ...) and language (BCP 47)."""

    name: str
    url: str
    category: str = ""
    language: str = "en"


@dataclass
class Capture(Record):
    """One capture of a source: the screenshots (sha256 of PNG blobs, in page order), their perceptual
    hashes, the page text and HTML (sha256 of `.txt` / `.html` blobs), where the browser ended up, the
    HTTP status and the UTC time. A failed capture has `error` and no screens; `unchanged` when its
    perceptual hashes equal the source's previous capture (nothing new to ask about); `blocked` names
    the hosts off the allowlist whose requests the browser refused."""

    source: dict[str, Any]
    mode: str
    url: str
    final_url: str = ""
    status: int | None = None
    captured_at: str = ""
    screens: list[str] = field(default_factory=list)
    phash: list[str] = field(default_factory=list)
    screen_size: str = ""
    text_sha: str = ""
    html_sha: str = ""
    error: str | None = None
    unchanged: bool = False
    blocked: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.source = Source.from_record(self.source).record()  # one key order, fresh or read back

    @property
    def key(self) -> str:
        """What identifies this capture's content (its screenshots and text), for the stages' cache keys."""
        return content_key("capture", self.url, self.mode, self.screens, self.text_sha)

    @property
    def site(self) -> Source:
        """The source this capture is of."""
        return Source.from_record(self.source)


@dataclass
class PageInfo(Record):
    """What the extractor read off a page: its text, its meaningful images and what they show, and
    what is new on it."""

    text: str
    images: str
    news: str


@dataclass
class Draft(Record):
    """A question at one of SUBTASKS with its reference answer and 0-10 grading criteria, as the
    generator wrote it or a later stage rewrote it; `page` is the capture key it was written from."""

    page: str
    index: int
    subtask: str
    question: str
    answer: str
    criteria: str

    @property
    def id(self) -> str:
        """The item's id: its page and position there (stable across the stages' rewrites)."""
        return content_key("item", self.page, self.index)[:16]


@dataclass
class Score(Record):
    """The scorer's grade of a finished item: authenticity (0-5), coherence (0-3), clarity (0-2),
    their sum and its reason."""

    authenticity: float
    coherence: float
    clarity: float
    reason: str

    @property
    def total(self) -> float:
        """The item's quality score, 0-10."""
        return self.authenticity + self.coherence + self.clarity


@dataclass
class Failure(Record):
    """A page or item a stage could not produce: which stage, whose id, why, and the raw reply the
    stage could not use (None when the call itself failed)."""

    stage: str
    subject: str
    reason: str
    raw: str | None = None


@dataclass
class Item(Record):
    """A finished item: the finalized draft, its score, the capture it came from, and which role
    models wrote, checked, finalized and scored it."""

    draft: dict[str, Any]
    score: dict[str, Any]
    capture: dict[str, Any]
    generator: str
    checker: str
    finalizer: str
    scorer: str
    checked: bool = True

    @property
    def id(self) -> str:
        """The item's id (its draft's)."""
        return Draft.from_record(self.draft).id
