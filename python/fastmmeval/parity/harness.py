"""Score the same responses with lmms-eval 0.7.3's code for a task and with ours, compare the
prompts, and name the listed difference that explains each disagreement.

A case is one doc with one response, scored alone (a one-doc run of each side); a slot is every
doc with its j-th response, scored as one run (so aggregations over several docs are compared
too). A disagreement is a `Mismatch`; the task file's `lmms_eval.differences` ids name registered
explainers (`parity.differences`), each saying whether its difference accounts for a mismatch."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastmmeval.engine.sampling import cut_at_stop
from fastmmeval.errors import ConfigError
from fastmmeval.judge.judge import Judge
from fastmmeval.judge.pipeline import judge_calls, judged_score, needs_judge
from fastmmeval.parity.differences import EXPLAINERS
from fastmmeval.parity.mismatch import Explainer, Mismatch, MismatchKind, Transform, same_value
from fastmmeval.parity.peer import PeerTask
from fastmmeval.parity.pool import response_pool
from fastmmeval.protocol import Doc, ImagePart, Request, Response
from fastmmeval.samples import aggregate
from fastmmeval.tasks.task import Task


@dataclass
class ParityReport:
    """The outcome of a parity check of one task."""

    task: str
    lmms_task: str
    docs: int
    cases: int
    listed: dict[str, str]
    mismatches: list[Mismatch]

    @property
    def unexplained(self) -> list[Mismatch]:
        """Mismatches no listed difference accounts for (a difference missing from the card, or a bug)."""
        return [m for m in self.mismatches if not m.explained_by]

    @property
    def unshown(self) -> list[str]:
        """Listed differences that explain no mismatch of this check (stale, or not exercised by these docs)."""
        shown = {d for m in self.mismatches for d in m.explained_by}
        return [d for d in self.listed if d not in shown]




@dataclass(frozen=True)
class Sides:
    """One task on both sides: ours (graded by `judge` where it needs one), lmms-eval's, and how our
    docs map to its docs."""

    task: Task
    peer: PeerTask
    docs: list[Doc]
    peer_docs: list[dict[str, Any]]
    requests: dict[str, Request]  # our request per doc id, built (images decoded) once
    judge: Judge | None = None


def check_task(
    task: Task,
    rows: Sequence[Mapping[str, Any]] | None = None,
    limit: int | None = None,
    responses: Callable[[Task, Doc], list[str]] = response_pool,
    extra: Mapping[str, Sequence[str]] | None = None,
    peer: PeerTask | None = None,
    explainers: Mapping[str, Explainer] | None = None,
    judge: Judge | None = None,
) -> ParityReport:
    """Compare `task` with its lmms-eval task (the task file's `lmms_eval.task`) on its first `limit`
    docs: prompts, every response of `responses(task, doc)` (plus `extra[doc_id]`) as its own case,
    and each slot of responses as one run. `rows` are the hub rows lmms-eval reads (default: the
    task's own rows); `peer` replaces the lmms-eval task (e.g. with patches for its GPT calls);
    `judge` grades our side where the task needs a judge, as a run's first judge does."""
    ref = task.config.lmms_eval
    if ref is None:
        raise ConfigError(f"task {task.name} names no lmms-eval task (lmms_eval.task) to compare with")
    if judge is None and needs_judge(task):
        raise ConfigError(
            f"task {task.name} is graded by a judge (and by GPT calls inside lmms-eval's scoring): its parity "
            "check needs the same stand-in judge on both sides, as tests/test_parity.py gives it"
        )
    peer = peer or PeerTask.load(ref.task)
    refs = task.doc_refs(limit)
    docs = [task.doc(r) for r in refs]
    raw = [task.rows[r.index] for r in refs] if rows is None else list(rows)[: len(refs)]
    requests = {d.id: task.request(d, seed=0) for d in docs}
    sides = Sides(task, peer, docs, peer.process_docs(raw), requests, judge)
    pools = {d.id: [*responses(task, d), *(extra or {}).get(d.id, ())] for d in docs}
    mismatches = [*_prompt_mismatches(sides), *_score_mismatches(sides, pools)]
    known = {d: (explainers or {}).get(d) or (EXPLAINERS.get(d) if d in EXPLAINERS else None) for d in ref.differences}
    for m in mismatches:
        m.explained_by = [d for d, explains in known.items() if explains is not None and explains(m, task)]
    cases = sum(map(len, pools.values()))
    return ParityReport(task.name, ref.task, len(docs), cases, dict(ref.differences), mismatches)


# --- prompts --------------------------------------------------------------------------------------


def prompt_parts(request: Request) -> list[tuple[str, str]]:
    """Our prompt as (kind, value) parts, adjacent texts joined and images as a content hash."""
    parts: list[tuple[str, str]] = []
    for message in request.messages:
        for p in message.content:
            parts.append(("image", _image_key(p.image)) if isinstance(p, ImagePart) else ("text", p.text))
    return _joined(parts)


def peer_prompt_parts(peer: PeerTask, doc: Mapping[str, Any]) -> list[tuple[str, str]]:
    """lmms-eval's prompt for `doc` in the same form."""
    return _joined([(k, _image_key(v) if k == "image" else str(v)) for k, v in peer.prompt(doc)])


def _joined(parts: list[tuple[str, str]]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for kind, value in parts:
        if kind == "text" and out and out[-1][0] == "text":
            out[-1] = ("text", out[-1][1] + value)
        elif kind != "text" or value:
            out.append((kind, value))
    return out


def _image_key(image: Any) -> str:
    from PIL import Image

    if not isinstance(image, Image.Image):
        return f"<{type(image).__name__}>"
    rgb = image.convert("RGB")
    return f"{rgb.size[0]}x{rgb.size[1]}:{hashlib.sha256(rgb.tobytes()).hexdigest()[:12]}"


def _prompt_mismatches(sides: Sides) -> list[Mismatch]:
    out = []
    for doc, peer_doc in zip(sides.docs, sides.peer_docs, strict=True):
        ours = prompt_parts(sides.requests[doc.id])
        theirs = peer_prompt_parts(sides.peer, peer_doc)
        if ours != theirs:
            out.append(Mismatch("prompt", "prompt", (doc.id,), (), ours, theirs))
    return out


# --- scores ---------------------------------------------------------------------------------------


def ours_results(
    task: Task,
    docs: Sequence[Doc],
    responses: Sequence[str],
    requests: Mapping[str, Request],
    judge: Judge | None = None,
) -> tuple[dict[str, Any], list[dict]]:
    """Our result keys (`metric,filter` -> value) and scored samples for docs (with their `requests`
    by doc id) answered with `responses`: each cut at the task's stop strings, as our backends return
    it, then scored (through `judge`'s verdicts when the task needs a judge and one is given)."""
    stops = task.config.generation.stop
    samples = []
    for doc, text in zip(docs, responses, strict=True):
        cut = cut_at_stop(text, stops) if stops else None
        response = Response(f"{task.name}/{doc.id}", text=text if cut is None else cut)
        sample = {"doc_id": doc.id, "categories": task.categories(doc)}  # the categories a run's sample records
        samples.append({**sample, **_score(task, doc, requests[doc.id], response, judge)})
    results = aggregate(task, samples, bootstrap_iters=0)
    return {k: v for k, v in results.items() if "," in k and "_stderr," not in k}, samples


def _score(task: Task, doc: Doc, request: Request, response: Response, judge: Judge | None) -> dict[str, Any]:
    """One doc's sample fields as a run scores them: by the rules, or with a judge through its
    verdicts on the judgments the doc needs."""
    if judge is None or not needs_judge(task):
        return task.score(doc, response)
    calls = judge_calls(task, doc, request, response)
    verdicts = judge.ask(calls)
    return judged_score(task, doc, response, {use: [v] for (use, _, _), v in zip(calls, verdicts, strict=True)})


def peer_results(peer: PeerTask, docs: Sequence[Mapping[str, Any]], responses: Sequence[str]) -> dict[str, Any]:
    """lmms-eval's result keys for its docs answered with `responses`."""
    items = [peer.process(doc, text) for doc, text in zip(docs, responses, strict=True)]
    return peer.aggregate(items)


def _score_mismatches(sides: Sides, pools: Mapping[str, list[str]]) -> list[Mismatch]:
    """Each case alone, then each slot; result keys are checked once, on the first run over all docs."""
    out: list[Mismatch] = []
    reported = sides.peer.result_keys()
    by_id = {d.id: (d, p) for d, p in zip(sides.docs, sides.peer_docs, strict=True)}
    first = True
    for doc_id, pool in pools.items():
        doc, peer_doc = by_id[doc_id]
        for text in pool:
            out += _compare(sides, "score", [doc], [peer_doc], [text], reported, check_keys=first and len(by_id) == 1)
            first = False
    width = max(map(len, pools.values()), default=0)
    if len(sides.docs) > 1:
        for j in range(width):
            texts = [pools[d.id][j % len(pools[d.id])] for d in sides.docs]
            out += _compare(sides, "aggregate", sides.docs, sides.peer_docs, texts, reported, check_keys=j == 0)
    return out


def _compare(
    sides: Sides,
    kind: MismatchKind,
    docs: list[Doc],
    peer_docs: list[dict[str, Any]],
    texts: list[str],
    reported: set[str],
    check_keys: bool,
) -> list[Mismatch]:
    ours, samples = ours_results(sides.task, docs, texts, sides.requests, sides.judge)
    theirs = peer_results(sides.peer, peer_docs, texts)
    ids = tuple(d.id for d in docs)
    out = []
    if check_keys:
        out += [Mismatch("keys", k, ids, (), None, theirs.get(k)) for k in sorted(reported - set(ours))]
    for key in sorted(reported & set(ours)):
        if not same_value(ours[key], theirs.get(key)):

            def again(transform: Transform, key: str = key) -> Any:
                return peer_results(sides.peer, peer_docs, [transform(t) for t in texts]).get(key)

            out.append(Mismatch(kind, key, ids, tuple(texts), ours[key], theirs.get(key), again, tuple(samples)))
    return out
