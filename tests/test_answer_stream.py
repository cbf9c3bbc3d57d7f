"""How the evaluator hands a task's requests to a backend: as one stream, answered in any order,
regrouped into `--batch_size` groups in doc order."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from fastmmeval.answering import Prepared, answered, prepared_docs
from fastmmeval.models.base import Model
from fastmmeval.protocol import Message, Request, Response, TextPart
from fastmmeval.tasks.task import DocRef


class Shuffler(Model):
    """Reads `window` requests ahead and answers the newest first (as a continuous-batching
    backend may finish short replies before long ones); `extra`/`skip` break the contract."""

    name = "shuffler"
    Args = dict

    def __init__(self, args: Any = None, window: int = 4, extra: str = "", skip: str = "") -> None:
        self.window, self.extra, self.skip = window, extra, skip
        self.pulled: list[int] = []  # how many requests had been pulled at each answer

    def respond(self, requests: Iterable[Request], batch_size: int) -> Iterator[Response]:
        held: list[Request] = []
        count = 0
        for request in requests:
            held.append(request)
            count += 1
            if len(held) == self.window:
                yield from self._answer(held, count)
        yield from self._answer(held, count)
        if self.extra:
            yield Response(self.extra, text="?")

    def _answer(self, held: list[Request], count: int) -> Iterator[Response]:
        while held:
            request = held.pop()
            self.pulled.append(count)
            if request.id != self.skip:
                yield Response(request.id, text=f"answer to {request.id}")

    def generate(self, requests: list[Request]) -> list[Response]:
        raise AssertionError("the evaluator streams")

    loglikelihood = generate

    def fingerprint(self) -> dict[str, Any]:
        return {}


def items(n: int, broken: set[int] = frozenset()) -> list[Prepared]:
    """n docs; those in `broken` have no request (their doc failed to load)."""
    out = []
    for i in range(n):
        ref = DocRef(i, f"d{i}")
        if i in broken:
            out.append(Prepared(ref, error="image missing"))
        else:
            out.append(Prepared(ref, {}, Request(f"r{i}", "generate", (Message("user", (TextPart("q"),)),))))
    return out


def test_answers_come_back_grouped_in_doc_order_whatever_order_the_model_answers_in() -> None:
    docs = items(11, broken={0, 5, 10})
    model = Shuffler(window=4)
    groups = list(answered(model, iter(docs), batch_size=3))
    assert [len(g) for g in groups] == [3, 3, 3, 2]
    flat = [pair for group in groups for pair in group]
    assert [item.ref.id for item, _ in flat] == [f"d{i}" for i in range(11)]
    for item, response in flat:
        if item.request is None:
            assert response is None
        else:
            assert response is not None and response.text == f"answer to {item.request.id}"
    assert max(model.pulled) == 8  # the model read past each group of 3: one stream, not batches


def test_a_model_that_answers_what_it_was_not_asked_or_leaves_a_request_unanswered_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="answered 'r9', which it was not asked"):
        list(answered(Shuffler(extra="r9"), iter(items(3)), batch_size=2))
    with pytest.raises(RuntimeError, match="left 2 requests unanswered"):
        list(answered(Shuffler(skip="r1"), iter(items(3)), batch_size=2))


def test_by_default_a_backend_is_called_batch_size_requests_at_a_time() -> None:
    calls: list[list[str]] = []

    class Batched(Shuffler):
        respond = Model.respond

        def generate(self, requests: list[Request]) -> list[Response]:
            calls.append([r.id for r in requests])
            return [Response(r.id, text="x") for r in requests]

    groups = list(answered(Batched(), iter(items(7, broken={2})), batch_size=3))
    assert calls == [["r0", "r1", "r3"], ["r4", "r5", "r6"]]
    assert [len(g) for g in groups] == [3, 3, 1]


class Counted:
    """A task stand-in that records which docs have been made into requests."""

    def __init__(self) -> None:
        self.made: list[str] = []

    def doc(self, ref: DocRef) -> dict[str, Any]:
        self.made.append(ref.id)
        return {"id": ref.id}

    def request(self, doc: dict[str, Any], seed: int) -> Request:
        return Request(f"r-{doc['id']}", "generate", (Message("user", (TextPart("q"),)),))


def test_docs_are_prepared_ahead_beside_the_model_or_in_runs_while_it_waits() -> None:
    refs = [DocRef(i, f"d{i}") for i in range(10)]

    class BusyCPU(Shuffler):
        def overlaps_input_work(self) -> bool:
            return False

    task = Counted()
    seen = [len(task.made) for _ in prepared_docs(BusyCPU(), task, refs, seed=0, workers=2, ahead=4)]
    assert seen == [4, 4, 4, 4, 8, 8, 8, 8, 10, 10]  # nothing is prepared while the model computes

    task = Counted()
    out = [item.request.id for item in prepared_docs(Shuffler(), task, refs, seed=0, workers=2, ahead=4)
           if item.request is not None]
    assert out == [f"r-d{i}" for i in range(10)] and sorted(task.made) == sorted(r.id for r in refs)
