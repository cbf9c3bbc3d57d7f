"""A task's docs on their way to the model and back: each doc made into its request in a
background pool ahead of the model (`prepared_docs`), and the requests given to the model as one
stream whose answers come back regrouped in doc order (`answered`), with a `Meter` of where the time went."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

from fastmmeval.errors import DocError
from fastmmeval.models import Model
from fastmmeval.pools import ordered_map
from fastmmeval.protocol import Doc, Request, Response
from fastmmeval.tasks.task import DocRef, Task


@dataclass
class Prepared:
    """A doc with its request, or the reason it could not be made into one."""

    ref: DocRef
    doc: Doc | None = None
    request: Request | None = None
    error: DocError | None = None
    seconds: float = 0.0  # spent making it (in the pool)


@dataclass
class Meter:
    """Where one task's time went in this process (seconds) and the tokens its model's responses
    report (None: no response said)."""

    prepare_s: float = 0.0  # docs made into requests, summed over the pool's workers
    model_s: float = 0.0  # in the model's calls, not counting their waits for prepared docs
    judge_s: float = 0.0  # the evaluator waiting for (and submitting to) the judges
    score_s: float = 0.0  # extraction, metrics and aggregation
    docs: int = 0
    prompt_tokens: int | None = None
    generated_tokens: int | None = None

    def count(self, response: Response) -> None:
        """Add a response's token counts (where its backend recorded them)."""
        if "prompt_tokens" in response.usage:
            self.prompt_tokens = (self.prompt_tokens or 0) + response.usage["prompt_tokens"]
        if "completion_tokens" in response.usage:
            self.generated_tokens = (self.generated_tokens or 0) + response.usage["completion_tokens"]

    def report(self, wall_s: float) -> dict[str, Any]:
        """results.json's `timing` and `tokens` of the task: token rates are per second of model time."""

        def rate(amount: float | None, seconds: float) -> float | None:
            return round(amount / seconds, 3) if amount is not None and seconds > 0 else None

        timing = {"wall_s": wall_s, "prepare_s": self.prepare_s, "model_s": self.model_s,
                  "judge_s": self.judge_s, "score_s": self.score_s}
        timing = {k: round(max(v, 0.0), 4) for k, v in timing.items()}
        timing["docs_per_s"] = rate(self.docs, wall_s)
        tokens = {"prompt": self.prompt_tokens, "generated": self.generated_tokens,
                  "prompt_per_s": rate(self.prompt_tokens, self.model_s),
                  "generated_per_s": rate(self.generated_tokens, self.model_s)}
        return {"timing": timing, "tokens": tokens}


def _prepare(model: Model, task: Task, ref: DocRef, seed: int) -> Prepared:
    start = time.perf_counter()
    try:
        doc = task.doc(ref)
        request = task.request(doc, seed)
    except DocError as e:
        return Prepared(ref, error=e, seconds=time.perf_counter() - start)
    model.prepare(request)
    return Prepared(ref, doc, request, seconds=time.perf_counter() - start)


def prepared_docs(
    model: Model, task: Task, refs: list[DocRef], seed: int, workers: int, ahead: int
) -> Iterator[Prepared]:
    """Docs with their requests in order; image decoding (and the model's own `prepare`, e.g. its
    image processor) runs in a pool. Where the model leaves cores free for it
    (`Model.overlaps_input_work`), the pool works up to `ahead` docs ahead of the consumer, so
    the model never waits on input work it could overlap; where the model's compute takes every
    core of this machine, each run of `ahead` docs is prepared while the consumer waits for it,
    and nothing runs beside the model (input work there would only slow its matrix products)."""
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="prepare") as pool:
        if not model.overlaps_input_work():
            for start in range(0, len(refs), ahead):
                yield from list(pool.map(partial(_prepare, model, task, seed=seed), refs[start : start + ahead]))
            return
        yield from ordered_map(pool, partial(_prepare, model, task, seed=seed), refs, ahead)


Answered = list[tuple[Prepared, Response | None]]


def answered(
    model: Model, items: Iterator[Prepared], batch_size: int, meter: Meter | None = None
) -> Iterator[Answered]:
    """`items` with the model's response to each (None for a doc that has no request), in order,
    `batch_size` at a time. The model gets the requests as one stream, so a continuously batching
    backend keeps its batch full across these groups. `meter` gets the time in preparation and in the
    model, and the responses' token counts."""
    meter = meter or Meter()
    queue: deque[Prepared] = deque()
    asked: set[str] = set()  # requests given to the model and not answered yet
    responses: dict[str, Response] = {}

    def requests() -> Iterator[Request]:
        while True:
            start = time.perf_counter()
            item = next(items, None)
            meter.model_s -= time.perf_counter() - start  # the model's call waited for this doc
            if item is None:
                return
            meter.prepare_s += item.seconds
            queue.append(item)
            if item.request is not None:
                asked.add(item.request.id)
                yield item.request

    def ready() -> Iterator[tuple[Prepared, Response | None]]:
        while queue and (queue[0].request is None or queue[0].request.id in responses):
            item = queue.popleft()
            yield item, responses.pop(item.request.id) if item.request is not None else None

    group: Answered = []
    for response in _timed(model.respond(requests(), batch_size), meter):
        meter.count(response)
        if response.request_id not in asked:
            raise RuntimeError(f"model {model.name!r} answered {response.request_id!r}, which it was not "
                               "asked or had answered already")
        asked.remove(response.request_id)
        responses[response.request_id] = response
        for pair in ready():
            group.append(pair)
            if len(group) == batch_size:
                yield group
                group = []
    group += ready()
    if queue:
        raise RuntimeError(f"model {model.name!r} left {len(queue)} requests unanswered")
    for start in range(0, len(group), batch_size):
        yield group[start : start + batch_size]


def _timed(responses: Iterator[Response], meter: Meter) -> Iterator[Response]:
    """`responses`, the time spent producing each added to the meter's model time."""
    while True:
        start = time.perf_counter()
        response = next(responses, None)
        meter.model_s += time.perf_counter() - start
        if response is None:
            return
        yield response
