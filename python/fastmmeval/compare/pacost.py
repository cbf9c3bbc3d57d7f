"""PaCoST (Zhang et al., 2024), as the MMBench-Live paper uses it (Section 4.5, Appendix B): is a model more
confident on a benchmark's questions as they are written than on paraphrases of them? A text-side proxy for
memorization, not a test of leakage (images, metadata and web exposure go unseen).

For each doc of each task:

1. the paraphrase role (any registered backend, a `live.roles.Role`) rewrites the doc's question field
   (prompt `compare/prompts/paraphrase.yaml`); the options, the images and every other field stay as they
   are. A paraphrase that is empty, repeats the question or drops a number the question writes in digits
   (`missing_numbers`) fails its pair.
2. The evaluated model answers the task's own request for the doc and for the doc with the paraphrase (the
   task's prompt and generation settings; a multiple-choice task in ppl mode answers with the option its
   headline picks). Then, in the same chat after its answer, it is asked whether that answer is correct
   (`compare/prompts/confidence.yaml`), and its confidence is c = P(" Yes") / (P(" Yes") + P(" No")) from
   one loglikelihood request scoring both continuations (`confidence`).
3. Δ_i = c_orig - c_para; the one-sided paired t-test of E[Δ] > 0, the mean and std of Δ and Cohen's d
   (`compare.stats`), per task and per category of each of the task's `breakdown` fields. A pair with any
   failed step is left out and counted by stage (doc, paraphrase, numbers, answer, confidence), never
   scored as 0.

Every model call (the role's and the evaluated model's) is kept in a stage cache in the output folder
(`live.store.StageCache`): a rerun asks nothing it was answered before. Failures are never cached.

Where ours follows the PaCoST reference (lleozhang/PaCoST, test_model_pipeline.py and test.py): the question
alone is paraphrased and the options are put back unchanged; the paraphrase prompt asks for the rewritten
question only, with the same meaning and the numbers unchanged; the confidence comes from the model's own
yes/no judgment of its answer; the test is `scipy.stats.ttest_rel(orig, para, alternative="greater")`.
Where it differs:

- confidence: the reference takes the softmax probability of one "yes" token id at the greedy decoding step
  that reads yes or no, in a fresh prompt ("The question is ... The answer is ... Is the answer correct
  according to the question?"), unnormalised; ours normalises P(" Yes") against P(" No") (the whole
  continuations' log-likelihoods, any tokenizer) and asks in a follow-up turn of the model's own chat, with
  its images, as the MMBench-Live paper describes the self-assessment;
- decoding: the reference samples the paraphrases and the answers (do_sample=True); ours is greedy (the
  role at temperature 0, the task's generation settings), so a rerun reproduces every number;
- failures: the reference drops a pair whose confidence is 0 (no yes/no token) without a record and does not
  check the paraphrase; ours checks the numbers and records every excluded pair with its stage and reason.

API backends need log-probabilities: `openai` has them from `fastmmeval serve` (its /loglikelihood), other
OpenAI-compatible servers answer 404 and the run stops naming the backend and the server; `anthropic` has
none and is refused before any call. No backend here reads top logprobs of a generated token.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastmmeval.compare.pacost_report import (
    CACHE_FILE,
    CONTINUATIONS,
    REPORT_FILE,
    Failure,
    PacostReport,
    Pair,
    TaskPacost,
    confidence,
    missing_numbers,
)
from fastmmeval.errors import ConfigError, DocError
from fastmmeval.extract.rules import LETTERS
from fastmmeval.images import DEFAULT_MAX_PIXELS
from fastmmeval.live.prompts import Prompt, packaged_prompt
from fastmmeval.live.store import StageCache, content_key, sha256_hex
from fastmmeval.protocol import Doc, ImagePart, Message, Request, Response, TextPart
from fastmmeval.tasks import resolve
from fastmmeval.tasks.task import Task
from fastmmeval.util import write_json_atomic

if TYPE_CHECKING:  # the model backends load in `pacost`: `fastmmeval compare` imports this module at start
    from fastmmeval.live.roles import Role, RoleSpec

def pacost(
    model_spec: RoleSpec,
    tasks: Sequence[str],
    paraphraser_spec: RoleSpec,
    out: Path,
    *,
    include_path: Iterable[str | Path] = (),
    limit: int | None = None,
    question_field: str = "question",
    seed: int = 0,
    batch_size: int | None = None,
    workers: int = 8,
    max_image_pixels: int | None = DEFAULT_MAX_PIXELS,
    allow_absolute_image_paths: bool = False,
) -> PacostReport:
    """PaCoST of the model `model_spec` names (its `role` names it in errors; its decoding settings are
    unused: each task's are) on the first `limit` docs of each of `tasks`, the doc field `question_field`
    paraphrased by `paraphraser_spec`'s role (`workers` of its calls at once); `batch_size` requests per
    model call (default: the backend's); task images read under `max_image_pixels` (None: no cap), absolute
    image paths only with `allow_absolute_image_paths`. Writes `out`/pacost.json and keeps every call in
    `out`/cache.sqlite."""
    if model_spec.role == paraphraser_spec.role:
        raise ConfigError(f"the evaluated model and the paraphraser need different role names, both are "
                          f"{model_spec.role!r}")
    from fastmmeval.live.roles import build_roles

    resolved = resolve(tasks, include_path, max_image_pixels, allow_absolute_image_paths)
    roles = build_roles([model_spec, paraphraser_spec])
    evaluated, paraphraser = roles[model_spec.role], roles[paraphraser_spec.role]
    _check_logprobs(evaluated)
    out.mkdir(parents=True, exist_ok=True)
    cache = StageCache(out / CACHE_FILE)
    try:
        calls = _Calls(evaluated, cache, batch_size or evaluated.model.default_batch_size())
        results = {}
        for task in resolved:
            results[task.name] = _run_task(task, limit, question_field, seed, paraphraser, calls, cache, workers)
    finally:
        cache.close()
    report = PacostReport(out / REPORT_FILE, evaluated.name, paraphraser.name, results)
    write_json_atomic(report.path, {
        "method": "PaCoST: one-sided paired t-test of E[c_orig - c_para] > 0, c = P(Yes) / (P(Yes) + P(No))",
        "model": {"name": evaluated.name, "fingerprint": calls.fingerprint},
        "paraphraser": {"name": paraphraser.name, "fingerprint": paraphraser.fingerprint()},
        "prompts": {p.name: {"id": p.id, "sha256": p.sha256} for p in (_prompt("paraphrase"), _prompt("confidence"))},
        "question_field": question_field,
        "continuations": list(CONTINUATIONS),
        "limit": limit,
        "seed": seed,
        "calls": {"paraphrase": dict(paraphraser.counts), **{k: dict(v) for k, v in calls.counts.items()}},
        "tasks": {name: r.to_json() for name, r in results.items()},
    })
    return report


def _prompt(name: str) -> Prompt:
    """The compare flow's prompt `name` (compare/prompts/<name>.yaml)."""
    return packaged_prompt("fastmmeval.compare", name)


def _check_logprobs(role: Role) -> None:
    """Refuse, before any call, an API backend that cannot score continuations (it raises ConfigError)."""
    from fastmmeval.models.api.client import ApiModel

    if isinstance(role.model, ApiModel):
        role.model.payload(Request("pacost:check", "loglikelihood", (Message("user", (TextPart("?"),)),),
                                   continuations=CONTINUATIONS))


class _Calls:
    """The evaluated model's calls through the stage cache, counted per stage."""

    def __init__(self, role: Role, cache: StageCache, batch_size: int) -> None:
        self.model = role.model
        self.fingerprint = {"model": role.spec.model, "backend": role.model.fingerprint()}
        self.cache = cache
        self.batch_size = batch_size
        self.counts: dict[str, Counter[str]] = {}

    def answer(self, stage: str, requests: list[Request]) -> dict[str, Response]:
        """Each request's response by request id, from the cache where it was answered before."""
        keys = {r.id: content_key("pacost", stage, self.fingerprint, _content(r)) for r in requests}
        out: dict[str, Response] = {}
        todo = []
        for request in requests:
            hit = self.cache.get(keys[request.id])
            if hit is None:
                todo.append(request)
            else:
                out[request.id] = Response(request.id, **hit)
        counts = self.counts.setdefault(stage, Counter())
        counts.update(cached=len(out), calls=len(todo))
        for response in self.model.respond(todo, self.batch_size):
            out[response.request_id] = response
            if response.error is None:
                kept = {"text": response.text, "logprobs": response.logprobs, "is_greedy": response.is_greedy}
                self.cache.put(keys[response.request_id], stage, kept)
            else:
                counts.update(failed=1)
        return out


def _content(request: Request) -> list[Any]:
    """What a request asks, its id aside (images by the hash of their pixels)."""
    from fastmmeval.models.socratic.socratic import image_key

    messages = [[m.role, [["image", image_key(p.image)] if isinstance(p, ImagePart) else ["text", p.text]
                          for p in m.content]] for m in request.messages]
    return [request.kind, messages, dataclasses.asdict(request.generation), list(request.continuations),
            request.json_schema]


@dataclass
class _Asked:
    """A doc on its way through the stages."""

    doc: Doc
    question: str
    paraphrase: str = ""
    paraphrased: Doc | None = None

    def failure(self, stage: str, reason: str) -> Failure:
        """This doc's failure at `stage`, with its question and paraphrase."""
        return Failure(self.doc.id, stage, reason, self.question, self.paraphrase or None)


def _run_task(task: Task, limit: int | None, question_field: str, seed: int, paraphraser: Role,
              calls: _Calls, cache: StageCache, workers: int) -> TaskPacost:
    refs = task.doc_refs(limit)
    result = TaskPacost(task.name, len(refs))
    asked: list[_Asked] = []
    for ref in refs:
        try:
            doc = task.doc(ref)
        except DocError as e:
            result.failures.append(Failure(ref.id, "doc", str(e)))
            continue
        if question_field not in doc.fields:
            raise ConfigError(f"task {task.name}, doc {doc.id}: no field {question_field!r} to paraphrase (its "
                              f"fields: {', '.join(sorted(doc.fields))}); name the question's field")
        question = doc.fields[question_field]
        if not isinstance(question, str) or not question.strip():
            result.failures.append(Failure(doc.id, "doc", f"field {question_field!r} holds no question text"))
            continue
        asked.append(_Asked(doc, question))
    asked = _paraphrased(task, asked, question_field, paraphraser, cache, workers, result.failures)
    chunk = max(64, 4 * calls.batch_size)  # requests hold decoded images: a chunk of docs at a time
    for start in range(0, len(asked), chunk):
        result.pairs.extend(_scored(task, asked[start:start + chunk], seed, calls, result.failures))
    return result


def _paraphrased(task: Task, asked: list[_Asked], question_field: str, paraphraser: Role, cache: StageCache,
                 workers: int, failures: list[Failure]) -> list[_Asked]:
    """The docs whose question the role paraphrased acceptably, each with its paraphrased doc."""
    prompt = _prompt("paraphrase")

    def ask(item: _Asked) -> Any:
        inputs = [sha256_hex(item.question.encode("utf-8"))]
        return paraphraser.ask("paraphrase", prompt, {"question": item.question}, (), cache, inputs)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        replies = list(pool.map(ask, asked))
    kept = []
    for item, reply in zip(asked, replies, strict=True):
        fail = item.failure
        if reply.text is None:
            failures.append(fail("paraphrase", reply.error or "no reply"))
            continue
        item.paraphrase = _clean(reply.text)
        if not item.paraphrase:
            failures.append(fail("paraphrase", "the paraphrase is empty"))
        elif item.paraphrase.casefold() == " ".join(item.question.split()).casefold():
            failures.append(fail("paraphrase", "the paraphrase repeats the question"))
        elif lost := missing_numbers(item.question, item.paraphrase):
            failures.append(fail("numbers", f"the paraphrase drops the number(s) {', '.join(lost)}"))
        else:
            try:
                item.paraphrased = _with_question(task, item.doc, question_field, item.paraphrase)
            except DocError as e:
                failures.append(fail("doc", str(e)))
                continue
            kept.append(item)
    return kept


def _clean(text: str) -> str:
    """A reply as one line, without the quotes a model may put around it."""
    line = " ".join(text.split())
    if len(line) > 1 and line[0] == line[-1] and line[0] in "\"'":
        line = line[1:-1].strip()
    return line


def _with_question(task: Task, doc: Doc, question_field: str, text: str) -> Doc:
    """`doc` with `text` in its question field and the fields its task's `process_doc` derives from it
    (e.g. MMBench's hinted_question) derived again."""
    fields = {**doc.fields, question_field: text}
    if task.process is not None:
        try:
            fields.update(task.process(fields))
        except (DocError, KeyError, TypeError, ValueError) as e:
            raise DocError(f"{task.where(doc)}: {task.config.process_doc} cannot read the paraphrased doc: "
                           f"{type(e).__name__}: {e}") from None
    return Doc(doc.task, doc.id, doc.index, fields)


def _scored(task: Task, asked: list[_Asked], seed: int, calls: _Calls, failures: list[Failure]) -> list[Pair]:
    """The pairs of the docs whose four calls all succeed; the others' failures appended."""
    asking = []
    for item in asked:
        assert item.paraphrased is not None
        try:
            original, para = task.request(item.doc, seed), task.request(item.paraphrased, seed)
        except DocError as e:
            failures.append(item.failure("doc", str(e)))
            continue
        if [m.text for m in original.messages] == [m.text for m in para.messages]:
            raise ConfigError(f"task {task.name}, doc {item.doc.id}: the paraphrased question changes nothing in the "
                              "prompt: its template does not show the question's field")
        asking.append((item, (original, dataclasses.replace(para, id=f"{para.id}#para"))))
    answers = calls.answer("answer", [r for _, requests in asking for r in requests])
    judging = []
    for item, requests in asking:
        try:
            said = tuple(_answer(task, doc, answers[r.id])
                         for doc, r in zip((item.doc, item.paraphrased), requests, strict=True))
        except DocError as e:
            failures.append(item.failure("answer", str(e)))
            continue
        judging.append((item, said, [_confidence_request(r, a) for r, a in zip(requests, said, strict=True)]))
    scores = calls.answer("confidence", [r for *_, requests in judging for r in requests])
    pairs = []
    for item, (answer_orig, answer_para), requests in judging:
        try:
            c_orig, c_para = (_confidence_of(scores[r.id]) for r in requests)
        except DocError as e:
            failures.append(item.failure("confidence", str(e)))
            continue
        pairs.append(Pair(item.doc.id, task.categories(item.doc), item.question, item.paraphrase, answer_orig,
                          answer_para, c_orig, c_para))
    return pairs


def _answer(task: Task, doc: Doc, response: Response) -> str:
    """What the model answered: its reply, or in ppl mode the text of the option the task's headline picks."""
    if response.error is not None:
        raise DocError(response.error)
    if response.logprobs is not None:
        letter = task.extraction(doc, response).value
        return task.options(doc)[LETTERS.index(letter)]
    if response.text is None:
        raise DocError("the model's reply has no text")
    return response.text.strip()


def _confidence_request(request: Request, answer: str) -> Request:
    """The chat of `request` with the model's `answer` and the question whether it is correct, scoring
    " Yes" and " No" as the start of the reply."""
    turns = (Message("assistant", (TextPart(answer),)), Message("user", (TextPart(_prompt("confidence").render()),)))
    return Request(f"{request.id}#confidence", "loglikelihood", (*request.messages, *turns), request.generation,
                   CONTINUATIONS)


def _confidence_of(response: Response) -> float:
    """c from a confidence response; DocError when it failed or its scores are unusable."""
    if response.error is not None:
        raise DocError(response.error)
    scores = response.logprobs or []
    if len(scores) != len(CONTINUATIONS) or not all(math.isfinite(s) for s in scores):
        raise DocError(f"the model scored {CONTINUATIONS} as {scores}: two finite log-probabilities expected")
    return confidence(*scores)
