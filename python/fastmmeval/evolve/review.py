"""The manual correctness check of a new version (the paper's: 10% of each atomic task's items, sampled at
random, checked by hand; 96.06% right for MMBench-Live): a self-contained review sheet of a seeded sample
per atomic task, read from the exported version itself, showing each item's image, question, options, the
generated answer, every step of its solution plan with its tool's output and the vision-blind verifier's
answer, with correct / incorrect buttons whose "Save decisions" downloads a file; `read_review` turns that
file into the correctness rate, overall and per atomic task.

    write_review_sheet(Path("v1"), Path("review.html"))          # 10% per atomic task, seed 0
    read_review(Path("review.json")).overall.rate                 # e.g. 0.9606

The page is live's review frame (`live.review.review_html`): it loads nothing, and every text is escaped."""

from __future__ import annotations

import html
import io
import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from fastmmeval.errors import ConfigError
from fastmmeval.evolve.benchmark import blank
from fastmmeval.extract.rules import LETTERS
from fastmmeval.live.review import data_uri, field_html, review_html, thumbnail
from fastmmeval.util import write_bytes_atomic

REVIEW_FORMAT = "fastmmeval.evolve-review"
VERDICTS = ("correct", "incorrect")
FRACTION = 0.1

_STYLE = """
article.item { border-left-color: #999; }
article.correct { border-left-color: #3a7; }
article.incorrect { border-left-color: #c33; }
ol.plan { margin: 0; padding-left: 20px; }
ol.plan li { margin-bottom: 4px; }
.output { color: #225; }
"""

_SCRIPT = """
function decisions() {
  const out = {};
  for (const item of document.querySelectorAll("article.item")) {
    const checked = item.querySelector("input[type=radio]:checked");
    out[item.dataset.id] = {task: item.dataset.task, decision: checked ? checked.value : null};
  }
  return out;
}
function tally() {
  const values = Object.values(decisions()).map(d => d.decision);
  for (const item of document.querySelectorAll("article.item")) {
    const checked = item.querySelector("input[type=radio]:checked");
    item.classList.toggle("correct", checked !== null && checked.value === "correct");
    item.classList.toggle("incorrect", checked !== null && checked.value === "incorrect");
  }
  const count = v => values.filter(x => x === v).length;
  document.getElementById("tally").textContent =
    count("correct") + " correct, " + count("incorrect") + " incorrect, " + count(null) + " undecided";
}
document.addEventListener("change", tally);
tally();
document.getElementById("save").addEventListener("click", () => {
  saveJson({format: FORMAT, version: 1, task: TASK, seed: SEED, fraction: FRACTION, items: decisions()},
           "review.json");
});
"""


@dataclass(frozen=True)
class _Item:
    """One question of the version as the sheet shows it (its rotation 0)."""

    id: str
    atomic: str
    ability: str
    question: str
    hint: str
    options: list[str]
    answer: str
    image: bytes
    plan: list[dict[str, Any]]
    observations: list[str]
    verifier_answer: str
    generator: str
    verifier: str
    url: str
    uploaded_at: str


def _export(version: Path) -> dict[str, Any]:
    """The export entry of the version's manifest (its task, split and layout)."""
    try:
        manifest = json.loads((version / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        manifest = None
    export = manifest.get("export") if isinstance(manifest, dict) else None
    if not isinstance(export, dict) or not isinstance(export.get("layout"), dict):
        raise ConfigError(f"{version}: not a version written by fastmmeval evolve (no manifest.json with its export)")
    return export


def _image_bytes(value: Any) -> bytes:
    value = value[0] if isinstance(value, list) and value else value
    if not isinstance(value, dict) or not isinstance(value.get("bytes"), bytes):
        raise ConfigError("an exported row holds no image bytes")
    return value["bytes"]


def _items(version: Path, export: dict[str, Any]) -> list[_Item]:
    """The version's questions, each once (the lowest index of its image), in index order."""
    import pyarrow.parquet as pq

    layout = export["layout"]
    rows = pq.read_table(version / f"{export['split']}.parquet").to_pylist()
    rows.sort(key=lambda r: int(r[layout["index"]]))  # a string id (SEED-Bench's) is our number too
    out, seen = [], set()
    for row in rows:
        if row["image_sha256"] in seen:
            continue
        seen.add(row["image_sha256"])
        options = [str(row[name]) for name in layout["options"] if not blank(row[name])]
        answer = row[layout["answer"]]
        out.append(_Item(
            id=row["image_sha256"], atomic=str(row[layout["atomic"]]),
            ability=str(row[layout["ability"]] or "") if layout["ability"] else "",
            question=row[layout["question"]], hint=(row[layout["hint"]] or "") if layout["hint"] else "",
            options=options, answer=LETTERS[answer] if isinstance(answer, int) else str(answer),
            image=_image_bytes(row[layout["image"]]), plan=json.loads(row["plan"]),
            observations=json.loads(row["observations"]), verifier_answer=row["verifier_answer"],
            generator=row["generator"], verifier=row["verifier"], url=row["page_url"] or row["image_url"],
            uploaded_at=row["uploaded_at"],
        ))  # fmt: skip
    return out


def sample_size(n: int, fraction: float) -> int:
    """How many of an atomic task's `n` items the sheet shows: `fraction` of them, rounded, at least one."""
    return min(n, max(1, math.floor(fraction * n + 0.5)))


def _sample(items: list[_Item], fraction: float, seed: int) -> list[_Item]:
    by_task: dict[str, list[_Item]] = {}
    for item in sorted(items, key=lambda i: (i.atomic, i.id)):
        by_task.setdefault(item.atomic, []).append(item)
    out = []
    for atomic, pool in sorted(by_task.items()):
        out += sorted(random.Random(f"{seed}/{atomic}").sample(pool, sample_size(len(pool), fraction)),
                      key=lambda i: i.id)  # fmt: skip
    return out


def _mime(data: bytes) -> str:
    with Image.open(io.BytesIO(data)) as image:
        return image.get_format_mimetype() or "application/octet-stream"


def _step(k: int, step: dict[str, Any], output: str | None) -> str:
    inputs = ", ".join(f"{name}={value}" for name, value in sorted((step.get("inputs") or {}).items()))
    call = f"{k}. {step.get('tool', '?')}({inputs})"
    purpose = f" — {step['purpose']}" if step.get("purpose") else ""
    said = "(no output)" if output is None else output
    return f'<li>{html.escape(call + purpose)}<br><span class="output">→ {html.escape(said)}</span></li>'


def _article(item: _Item, thumb: str) -> str:
    key = html.escape(item.id)
    options = "\n".join(f"{LETTERS[k]}. {text}" for k, text in enumerate(item.options))
    chosen = LETTERS.index(item.answer) if item.answer in LETTERS[: len(item.options)] else None
    answer = item.answer + (f". {item.options[chosen]}" if chosen is not None else "")
    agrees = "agrees with the generated answer" if item.verifier_answer == item.answer else "differs"
    steps = "".join(_step(k + 1, s, item.observations[k] if k < len(item.observations) else None)
                    for k, s in enumerate(item.plan))  # fmt: skip
    radios = "".join(f'<label><input type="radio" name="verdict-{key}" value="{v}"> {v}</label> ' for v in VERDICTS)
    return (
        f'<article class="item" id="item-{key}" data-id="{key}" data-task="{html.escape(item.atomic)}">'
        f'<div class="shots"><img class="thumb" data-full="{key}" src="{thumb}" alt="image of item {key}"></div>'
        f'<div class="body"><h2>{html.escape(item.atomic)} · {html.escape(item.ability or "no ability level")} · '
        f'item {key[:12]}</h2><p class="status">{html.escape(item.url)} · uploaded {html.escape(item.uploaded_at)}</p>'
        "<dl>"
        + field_html("Question", item.question)
        + (field_html("Hint", item.hint) if item.hint else "")
        + field_html("Options", options)
        + field_html("Generated answer", answer)
        + f'<dt>Solution plan and tool outputs</dt><dd><ol class="plan">{steps}</ol></dd>'
        + field_html("Verifier's answer", f"{item.verifier_answer} ({agrees})")
        + field_html("Models", f"generator {item.generator}, verifier {item.verifier}")
        + f"</dl><fieldset>{radios}</fieldset></div></article>"
    )


def _js(value: Any) -> str:
    return json.dumps(value).replace("<", "\\u003c")


def write_review_sheet(version: Path, out: Path, *, fraction: float = FRACTION, seed: int = 0) -> Path:
    """Write the review sheet of the exported version in folder `version` to `out`: per atomic task a
    sample of `fraction` of its questions (at least one), picked with `seed` (another seed, another
    independent sample). Returns `out`."""
    if not 0 < fraction <= 1:
        raise ConfigError(f"evolve review: the fraction reviewed is in (0, 1], got {fraction!r}")
    export = _export(version)
    items = _items(version, export)
    sample = _sample(items, fraction, seed)
    thumbs = {item.id: thumbnail(item.image) for item in sample}
    full = {item.id: data_uri(_mime(item.image), item.image) for item in sample}
    articles = "\n".join(_article(item, thumbs[item.id]) for item in sample)
    controls = '<button id="save" type="button">Save decisions</button> <span id="tally"></span>'
    constants = {"FORMAT": REVIEW_FORMAT, "TASK": export["task"], "SEED": seed, "FRACTION": fraction}
    script = "".join(f"const {name} = {_js(value)};" for name, value in constants.items()) + _SCRIPT
    shown = f"{len(sample)} of {len(items)} items ({fraction:.0%} per atomic task, seed {seed})"
    title = f"{export['task']} review: {shown}"
    write_bytes_atomic(out, review_html(title, controls, articles, full, script, _STYLE).encode("utf-8"))
    return out


@dataclass(frozen=True)
class Tally:
    """Reviewed items: how many were judged correct, incorrect, or left undecided."""

    correct: int = 0
    incorrect: int = 0
    undecided: int = 0

    @property
    def rate(self) -> float | None:
        """The fraction of decided items judged correct (None when none was decided)."""
        decided = self.correct + self.incorrect
        return self.correct / decided if decided else None

    def add(self, decision: str | None) -> Tally:
        """This tally with one more item."""
        return Tally(self.correct + (decision == "correct"), self.incorrect + (decision == "incorrect"),
                     self.undecided + (decision is None))  # fmt: skip


@dataclass(frozen=True)
class ReviewResult:
    """A saved review: the version's task, its seed and fraction, and the tallies overall and per atomic task."""

    task: str
    seed: int
    fraction: float
    overall: Tally
    by_task: dict[str, Tally] = field(default_factory=dict)


def read_review(path: Path) -> ReviewResult:
    """The decisions a review sheet saved, tallied overall and per atomic task (a ConfigError naming the
    file and the entry at fault)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ConfigError(f"{path}: not a readable review file ({e})") from None
    if not isinstance(data, dict) or data.get("format") != REVIEW_FORMAT or not isinstance(data.get("items"), dict):
        raise ConfigError(f'{path}: expected a review sheet\'s file ({{"format": "{REVIEW_FORMAT}", "items": ...}})')
    overall, by_task = Tally(), {}
    for item_id, entry in sorted(data["items"].items()):
        decision = entry.get("decision") if isinstance(entry, dict) else "?"
        task = entry.get("task") if isinstance(entry, dict) else None
        if decision is not None and decision not in VERDICTS or not isinstance(task, str):
            raise ConfigError(f"{path}: items[{item_id!r}]: expected {{task, decision: correct, incorrect or null}}, "
                              f"got {entry!r}")  # fmt: skip
        overall = overall.add(decision)
        by_task[task] = by_task.get(task, Tally()).add(decision)
    return ReviewResult(str(data.get("task", "")), int(data.get("seed", 0)), float(data.get("fraction", FRACTION)),
                        overall, dict(sorted(by_task.items())))  # fmt: skip
