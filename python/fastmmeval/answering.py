"""A task's docs on their way to the model and back: each doc made into its request in a
background pool ahead of the model (`prepared_docs`), and the requests given to the model as one
stream whose answers come back regrouped in doc order (`answered`)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

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


def _prepare(model: Model, task: Task, ref: DocRef, seed: int) -> Prepared:
    try:
        doc = task.doc(ref)
        request = task.request(doc, seed)
    except DocError as e:
        return Prepared(ref, error=e)
    model.prepare(request)
    return Prepared(ref, doc, request)


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


def answered(model: Model, items: Iterator[Prepared], batch_size: int) -> Iterator[Answered]:
    """`items` with the model's response to each (None for a doc that has no request), in order,
    `batch_size` at a time. The model gets the requests as one stream, so a continuously batching
    backend keeps its batch full across these groups."""
    queue: deque[Prepared] = deque()
    asked: set[str] = set()  # requests given to the model and not answered yet
    responses: dict[str, Response] = {}

    def requests() -> Iterator[Request]:
        for item in items:
            queue.append(item)
            if item.request is not None:
                asked.add(item.request.id)
                yield item.request

    def ready() -> Iterator[tuple[Prepared, Response | None]]:
        while queue and (queue[0].request is None or queue[0].request.id in responses):
            item = queue.popleft()
            yield item, responses.pop(item.request.id) if item.request is not None else None

    group: Answered = []
    for response in model.respond(requests(), batch_size):
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
