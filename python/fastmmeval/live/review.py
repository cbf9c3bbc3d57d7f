"""Pipeline step 4's human check: a self-contained HTML review page (each item's screenshots, question,
answer, criteria, scores and reason, with accept/reject controls defaulting to the selection) whose Save
button downloads a decisions file, and the reader of that file, which `export_month` honours.

The page loads nothing: screenshots are data URIs (thumbnails in the page, each full image once, shown on
click) and its content security policy allows no fetch. What the models wrote is data: every text is
HTML-escaped."""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Sequence
from pathlib import Path

from PIL import Image

from fastmmeval.errors import ConfigError
from fastmmeval.live.records import Capture, Draft, Item, Score, Source
from fastmmeval.live.select import Selection, listing_key
from fastmmeval.live.store import Blobs
from fastmmeval.util import write_bytes_atomic

DECISIONS = ("accept", "reject")
DECISIONS_FORMAT = "fastmmeval.live-decisions"
THUMBNAIL = (360, 1080)

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #1d1d1f; background: #f4f4f2; }
header { position: sticky; top: 0; background: #fff; border-bottom: 1px solid #ccc; padding: 8px 16px; z-index: 1; }
header h1 { font-size: 18px; margin: 0 12px 0 0; display: inline; }
article { display: flex; gap: 16px; background: #fff; margin: 12px 16px; padding: 12px; border-left: 6px solid #3a7; }
article.reject { border-left-color: #c33; opacity: .75; }
.shots { flex: 0 0 auto; display: flex; flex-direction: column; gap: 6px; }
.shots img { max-width: 360px; cursor: zoom-in; border: 1px solid #ddd; }
.body { flex: 1; min-width: 0; }
.body h2 { font-size: 15px; margin: 0 0 6px; }
dt { font-weight: 600; margin-top: 6px; }
dd { margin: 0; white-space: pre-wrap; overflow-wrap: anywhere; }
.status { color: #555; }
fieldset { border: 0; padding: 6px 0 0; }
#viewer { position: fixed; inset: 0; background: rgba(0, 0, 0, .85); overflow: auto; cursor: zoom-out; z-index: 2; }
#viewer img { display: block; margin: 16px auto; max-width: none; }
"""

_SCRIPT = """
const full = JSON.parse(document.getElementById("full-images").textContent);
const viewer = document.getElementById("viewer");
for (const img of document.querySelectorAll("img.thumb")) {
  img.addEventListener("click", () => {
    viewer.firstElementChild.src = full[img.dataset.full];
    viewer.hidden = false;
  });
}
viewer.addEventListener("click", () => { viewer.hidden = true; viewer.firstElementChild.removeAttribute("src"); });
function decisions() {
  const out = {};
  for (const item of document.querySelectorAll("article.item")) {
    out[item.dataset.id] = item.querySelector("input[type=radio]:checked").value;
  }
  return out;
}
function tally() {
  const values = Object.values(decisions());
  for (const item of document.querySelectorAll("article.item")) {
    item.classList.toggle("reject", item.querySelector("input[type=radio]:checked").value === "reject");
  }
  document.getElementById("tally").textContent =
    values.filter(v => v === "accept").length + " accepted, " + values.filter(v => v === "reject").length + " rejected";
}
document.addEventListener("change", tally);
tally();
document.getElementById("save").addEventListener("click", () => {
  const body = JSON.stringify({format: FORMAT, version: 1, decisions: decisions()}, null, 1) + "\\n";
  const url = URL.createObjectURL(new Blob([body], {type: "application/json"}));
  const link = document.createElement("a");
  link.href = url;
  link.download = "decisions.json";
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 0);
});
"""


def _data_uri(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _thumbnail(png: bytes) -> str:
    with Image.open(io.BytesIO(png)) as image:
        small = image.convert("RGB")
        small.thumbnail(THUMBNAIL)
        buf = io.BytesIO()
        small.save(buf, format="JPEG", quality=80)
    return _data_uri("image/jpeg", buf.getvalue())


def _field(name: str, value: str) -> str:
    return f"<dt>{html.escape(name)}</dt><dd>{html.escape(value)}</dd>"


def _article(item: Item, thumbs: dict[str, str], selection: Selection | None) -> str:
    draft, score = Draft.from_record(item.draft), Score.from_record(item.score)
    capture = Capture.from_record(item.capture)
    source = Source.from_record(capture.source)
    if selection is None:
        default, status = "accept", "no selection given"
    elif item.id in selection.kept:
        default, status = "accept", "selected"
    else:
        dropped = selection.dropped.get(item.id)
        default, status = "reject", f"not selected: {dropped.detail}" if dropped else "not selected"
    shots = "".join(
        f'<img class="thumb" data-full="{sha}" src="{thumbs[sha]}" alt="screenshot {k + 1} of {len(capture.screens)}">'
        for k, sha in enumerate(capture.screens)
    )
    scores = (
        f"{score.total:g}/10 (authenticity {score.authenticity:g}/5, coherence {score.coherence:g}/3, "
        f"clarity {score.clarity:g}/2)"
    )
    models = f"generator {item.generator}, checker {item.checker}, finalizer {item.finalizer}, scorer {item.scorer}"
    radios = "".join(
        f'<label><input type="radio" name="decision-{html.escape(item.id)}" value="{d}"'
        f"{' checked' if d == default else ''}> {d}</label> "
        for d in DECISIONS
    )
    return (
        f'<article class="item" id="item-{html.escape(item.id)}" data-id="{html.escape(item.id)}">'
        f'<div class="shots">{shots}</div><div class="body">'
        f"<h2>{html.escape(draft.subtask)} · {html.escape(source.name)} · item {html.escape(item.id)}</h2>"
        f'<p class="status">{html.escape(capture.final_url or capture.url)} · {html.escape(capture.captured_at)} · '
        f"{html.escape(status)}</p><dl>"
        + _field("Question", draft.question)
        + _field("Answer", draft.answer)
        + _field("Criteria", draft.criteria)
        + _field("Score", scores)
        + _field("Reason", score.reason)
        + _field("Models", models)
        + f"</dl><fieldset>{radios}</fieldset></div></article>"
    )


def review_page(items: Sequence[Item], blobs: Blobs, out: Path, selection: Selection | None = None) -> Path:
    """Write the review page of `items` to `out` (listed by subtask, best-scored first; accept/reject
    defaulting to `selection`, or accept for all without one); returns `out`."""
    shas = sorted({sha for item in items for sha in Capture.from_record(item.capture).screens})
    pngs = {sha: blobs.get(sha, ".png") for sha in shas}
    thumbs = {sha: _thumbnail(png) for sha, png in pngs.items()}
    full = json.dumps({sha: _data_uri("image/png", png) for sha, png in pngs.items()}).replace("<", "\\u003c")
    articles = "\n".join(_article(item, thumbs, selection) for item in sorted(items, key=listing_key))
    policy = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{policy}">
<title>LiveBench review: {len(items)} items</title><style>{_STYLE}</style></head>
<body><header><h1>LiveBench review: {len(items)} items</h1>
<button id="save" type="button">Save decisions</button> <span id="tally"></span></header>
<main>
{articles}
</main>
<div id="viewer" hidden><img alt="full screenshot"></div>
<script type="application/json" id="full-images">{full}</script>
<script>const FORMAT = {json.dumps(DECISIONS_FORMAT)};{_SCRIPT}</script>
</body></html>
"""
    write_bytes_atomic(out, page.encode("utf-8"))
    return out


def read_decisions(path: Path) -> dict[str, str]:
    """The decisions a review page saved: item id -> accept or reject (a ConfigError naming the file and the
    entry at fault)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ConfigError(f"{path}: not a readable decisions file ({e})") from None
    decisions = data.get("decisions") if isinstance(data, dict) else None
    if not isinstance(decisions, dict):
        raise ConfigError(
            f'{path}: expected {{"decisions": {{item id: "accept" or "reject"}}}}, as a review page saves'
        )
    for item_id, decision in decisions.items():
        if decision not in DECISIONS:
            raise ConfigError(f"{path}: decisions[{item_id!r}]: expected accept or reject, got {decision!r}")
    return dict(decisions)
