"""Pipeline step 4's human check: a self-contained HTML review page (each item's screenshots, question,
answer, criteria, scores and reason, with accept/reject controls defaulting to the selection) whose Save
button downloads a decisions file, and the reader of that file, which `export_month` honours.

The page loads nothing: screenshots are data URIs (thumbnails in the page, each full image once, shown on
click) and its content security policy allows no fetch. What the models wrote is data: every text is
HTML-escaped. The page's frame (`review_html`: header, viewer, JSON download) serves evolve's review too."""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Mapping, Sequence
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

# The page's image viewer (a thumbnail opens its full image, held once in #full-images) and `saveJson`,
# which downloads a JSON file: what every review page shares.
_VIEWER_SCRIPT = """
const full = JSON.parse(document.getElementById("full-images").textContent);
const viewer = document.getElementById("viewer");
for (const img of document.querySelectorAll("img.thumb")) {
  img.addEventListener("click", () => {
    viewer.firstElementChild.src = full[img.dataset.full];
    viewer.hidden = false;
  });
}
viewer.addEventListener("click", () => { viewer.hidden = true; viewer.firstElementChild.removeAttribute("src"); });
function saveJson(data, name) {
  const body = JSON.stringify(data, null, 1) + "\\n";
  const url = URL.createObjectURL(new Blob([body], {type: "application/json"}));
  const link = document.createElement("a");
  link.href = url;
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 0);
}
"""

_SCRIPT = """
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
  saveJson({format: FORMAT, version: 1, decisions: decisions()}, "decisions.json");
});
"""


def data_uri(mime: str, data: bytes) -> str:
    """`data` as a data: URI of type `mime`."""
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def thumbnail(image_bytes: bytes) -> str:
    """A JPEG data URI of the image, at most THUMBNAIL in size."""
    with Image.open(io.BytesIO(image_bytes)) as image:
        small = image.convert("RGB")
        small.thumbnail(THUMBNAIL)
        buf = io.BytesIO()
        small.save(buf, format="JPEG", quality=80)
    return data_uri("image/jpeg", buf.getvalue())


def field_html(name: str, value: str) -> str:
    """A definition-list entry, both texts escaped."""
    return f"<dt>{html.escape(name)}</dt><dd>{html.escape(value)}</dd>"


def review_html(title: str, controls: str, articles: str, full: Mapping[str, str], script: str, style: str = "") -> str:
    """A self-contained review page: `title` (text), the header's `controls` and the `articles` (markup,
    every text in them escaped by the caller), the full images by id (data URIs) that thumbnails
    (`img.thumb` with `data-full`) open, and the page's own `script` (which may call `saveJson(data,
    name)`) and extra `style`. Its content security policy allows no fetch."""
    images = json.dumps(dict(full)).replace("<", "\\u003c")
    policy = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"
    heading = html.escape(title)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{policy}">
<title>{heading}</title><style>{_STYLE}{style}</style></head>
<body><header><h1>{heading}</h1>
{controls}</header>
<main>
{articles}
</main>
<div id="viewer" hidden><img alt="full image"></div>
<script type="application/json" id="full-images">{images}</script>
<script>{_VIEWER_SCRIPT}{script}</script>
</body></html>
"""


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
        + field_html("Question", draft.question)
        + field_html("Answer", draft.answer)
        + field_html("Criteria", draft.criteria)
        + field_html("Score", scores)
        + field_html("Reason", score.reason)
        + field_html("Models", models)
        + f"</dl><fieldset>{radios}</fieldset></div></article>"
    )


def review_page(items: Sequence[Item], blobs: Blobs, out: Path, selection: Selection | None = None) -> Path:
    """Write the review page of `items` to `out` (listed by subtask, best-scored first; accept/reject
    defaulting to `selection`, or accept for all without one); returns `out`."""
    shas = sorted({sha for item in items for sha in Capture.from_record(item.capture).screens})
    pngs = {sha: blobs.get(sha, ".png") for sha in shas}
    thumbs = {sha: thumbnail(png) for sha, png in pngs.items()}
    full = {sha: data_uri("image/png", png) for sha, png in pngs.items()}
    articles = "\n".join(_article(item, thumbs, selection) for item in sorted(items, key=listing_key))
    controls = '<button id="save" type="button">Save decisions</button> <span id="tally"></span>'
    script = f"const FORMAT = {json.dumps(DECISIONS_FORMAT)};{_SCRIPT}"
    page = review_html(f"LiveBench review: {len(items)} items", controls, articles, full, script)
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
