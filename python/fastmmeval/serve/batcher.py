"""Feeding concurrent HTTP requests into one model together.

One worker thread owns the model. HTTP handlers `prepare` their request off the event loop (chat
template, tokenizer, image preprocessing), then `submit` it and await the returned future.

- `EngineBatcher` (a model with a continuous-batching engine, e.g. `hf`): between two engine steps
  the worker adds every request that has arrived to the engine, so a new request joins the running
  batch at the next step instead of waiting for the batch to finish; a request whose future was
  cancelled (its HTTP client went away) leaves the engine at the next step.
- `MicroBatcher` (any other Model, e.g. `socratic`): the worker takes whatever arrived within
  `window_s` of the first waiting request, up to `max_batch`, and answers it with one
  `generate` / `loglikelihood` call per kind.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any, Protocol, runtime_checkable

from fastmmeval.models.base import Model, each_or_alone, failure_reason
from fastmmeval.protocol import Request, Response

log = logging.getLogger(__name__)

# How often an idle worker looks whether it was stopped.
IDLE_POLL_S = 0.05
STOPPED = "the server is shutting down"

_Item = tuple[Request, Any, "Future[Response]"]


@runtime_checkable
class EngineBacked(Protocol):
    """A Model whose generation runs on a continuous-batching `engine` (see `fastmmeval.models.local.hf`)."""

    engine: Any

    def build_prompt(self, request: Request) -> tuple[list[int], Any] | str: ...


class Batcher(ABC):
    """A worker thread answering submitted Requests with the model; `stop` fails what is left."""

    def __init__(self, model: Model, max_batch: int, window_s: float) -> None:
        self.model = model
        self.max_batch = max_batch
        self.window_s = window_s
        self.batches: list[int] = []  # size of each group of requests taken together (for tests, logs)
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._stopped = threading.Event()
        self._lock = threading.Lock()  # no request is queued after `stop` drained the queue
        self._thread = threading.Thread(target=self._work, name=f"fastmmeval-serve-{model.name}", daemon=True)
        self._thread.start()

    def prepare(self, request: Request) -> Any:
        """The request's input work, done on the caller's thread ahead of `submit`; what it returns
        goes to `submit`."""
        self.model.prepare(request)

    def submit(self, request: Request, prepared: Any = None) -> Future[Response]:
        """Queue `request`; the future gets its Response (or RuntimeError once stopped)."""
        future: Future[Response] = Future()
        with self._lock:
            if self._stopped.is_set():
                future.set_exception(RuntimeError(STOPPED))
            else:
                self._queue.put((request, prepared, future))
        return future

    def stop(self) -> None:
        """Stop the worker; requests not yet answered fail with RuntimeError."""
        with self._lock:
            self._stopped.set()
        self._thread.join()
        self._fail_held(RuntimeError(STOPPED))
        while items := self._take(wait=False):
            for _, _, future in items:
                _resolve(future, RuntimeError(STOPPED))

    def _work(self) -> None:
        while not self._stopped.is_set():
            items = self._take(wait=self._idle())
            try:
                self._handle(items)
            except Exception as e:  # a bug, not a bad request: fail what is in hand, keep serving
                log.exception("serve: the model worker failed")
                reason = failure_reason("the server's model worker failed", e)
                for request, _, future in items:
                    _resolve(future, Response(request.id, error=reason))
                self._fail_held(reason)

    def _take(self, wait: bool) -> list[_Item]:
        """What is queued: when `wait`, block for a first item, then keep collecting for `window_s`;
        at most `max_batch` items, those already cancelled left out."""
        items: list[_Item] = []
        if wait:
            try:
                items.append(self._queue.get(timeout=IDLE_POLL_S))
            except queue.Empty:
                return items
            deadline = time.monotonic() + self.window_s
            while len(items) < self.max_batch and (left := deadline - time.monotonic()) > 0:
                try:
                    items.append(self._queue.get(timeout=left))
                except queue.Empty:
                    break
        while len(items) < self.max_batch:
            try:
                items.append(self._queue.get_nowait())
            except queue.Empty:
                break
        items = [item for item in items if not item[2].cancelled()]
        if items:
            self.batches.append(len(items))
        return items

    def _answer(self, call: Callable[[list[Request]], list[Response]], items: list[_Item], what: str) -> None:
        """Answer `items` with one model call (one by one where that call raises)."""
        if not items:
            return
        answers = each_or_alone(call, [r for r, _, _ in items])
        for (request, _, future), answer in zip(items, answers, strict=True):
            _resolve(future, _response(request, answer, what))

    def _idle(self) -> bool:
        """Whether the worker has nothing in hand (then it waits for requests)."""
        return True

    @abstractmethod
    def _handle(self, items: list[_Item]) -> None:
        """One round of the worker: answer or take in `items`, and advance the model."""

    def _fail_held(self, outcome: str | Exception) -> None:  # noqa: B027 (optional hook)
        """Fail the requests the worker holds besides `items` (a reason, or the exception to raise)."""


class MicroBatcher(Batcher):
    """Whatever arrived within a few milliseconds goes to the model in one call per kind."""

    def _handle(self, items: list[_Item]) -> None:
        self._answer(self.model.generate, [i for i in items if i[0].kind == "generate"], "generation failed")
        self._answer(self.model.loglikelihood, [i for i in items if i[0].kind == "loglikelihood"], "scoring failed")


class EngineBatcher(Batcher):
    """New requests join the engine's running batch at its next step."""

    def __init__(self, model: Model, max_batch: int, window_s: float) -> None:
        if not isinstance(model, EngineBacked):
            raise TypeError(f"model {model.name!r} has no continuous-batching engine")
        self.engine = model.engine
        self._running: dict[int, tuple[Request, list[int], Future[Response], Any]] = {}
        self.aborted = 0  # sequences dropped because their caller gave up
        super().__init__(model, max_batch, window_s)

    def prepare(self, request: Request) -> Any:
        """A generate request's prompt ids and prefill inputs (or why it has none); a
        loglikelihood request is prepared by the model itself."""
        if request.kind == "generate":
            return self.model.build_prompt(request)  # type: ignore[attr-defined]
        return super().prepare(request)

    def _idle(self) -> bool:
        return not self.engine.scheduler.has_unfinished()

    def _handle(self, items: list[_Item]) -> None:
        for request, built, future in items:
            if request.kind == "generate":
                self._add(request, built, future)
        self._answer(self.model.loglikelihood, [i for i in items if i[0].kind == "loglikelihood"], "scoring failed")
        for seq_id, (_, _, future, seq) in list(self._running.items()):
            if future.cancelled():
                self.engine.abort(seq)
                del self._running[seq_id]
                self.aborted += 1
        if not self.engine.scheduler.has_unfinished():
            return
        try:
            finished = self.engine.step()
        except Exception as e:  # the batch's state is lost: every running request fails with the reason
            self._fail_held(failure_reason("generation failed", e))
            return
        for seq in finished:
            self._finish(seq)

    def _add(self, request: Request, built: tuple[list[int], Any] | str, future: Future[Response]) -> None:
        if isinstance(built, str):
            _resolve(future, Response(request.id, error=built))
            return
        ids, inputs = built
        try:
            seq = self.engine.add(ids, request.generation, inputs)
        except Exception as e:
            _resolve(future, Response(request.id, error=failure_reason("generation failed", e)))
            return
        self._running[seq.seq_id] = (request, ids, future, seq)
        if seq.is_finished:
            self._finish(seq)

    def _finish(self, seq: Any) -> None:
        request, ids, future, _ = self._running.pop(seq.seq_id)
        usage = {"prompt_tokens": len(ids), "completion_tokens": len(seq.output_ids)}
        _resolve(future, Response(request.id, text=seq.text, usage=usage))

    def _fail_held(self, outcome: str | Exception) -> None:
        """Empty the engine; its requests get a failed Response with the reason `outcome`, or raise it."""
        self.engine.clear()
        for request, _, future, _ in self._running.values():
            _resolve(future, Response(request.id, error=outcome) if isinstance(outcome, str) else outcome)
        self._running.clear()


def make_batcher(model: Model, max_batch: int = 32, window_s: float = 0.005) -> Batcher:
    """The engine-stepping batcher for an engine-backed model, else the micro-batcher."""
    cls = EngineBatcher if isinstance(model, EngineBacked) else MicroBatcher
    return cls(model, max_batch, window_s)


def _resolve(future: Future[Response], outcome: Response | Exception) -> None:
    """Give `future` its Response or exception, unless its caller cancelled it (then nobody waits)."""
    with contextlib.suppress(InvalidStateError):
        if isinstance(outcome, Exception):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)


def _response(request: Request, answer: Response | Exception, what: str) -> Response:
    """The model's Response, or a failed one with the reason its call raised."""
    if isinstance(answer, Exception):
        return Response(request.id, error=failure_reason(what, answer))
    return answer
