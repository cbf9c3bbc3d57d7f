"""Judging a task's docs alongside inference: which judgments a doc needs, a panel of judges that
works in the background while the model answers the next batch, and the doc's scores once the
verdicts are in. The first judge decides scores; the others are recorded for agreement."""

from __future__ import annotations

import queue
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from fastmmeval.extract import UNPARSED, Extraction
from fastmmeval.extract.judge_assisted import JUDGE_ASSISTED, JUDGE_FINISH
from fastmmeval.judge.judge import Judge, Verdict
from fastmmeval.judge.prompts import PROMPTS, JudgeInput, JudgePrompt
from fastmmeval.protocol import Doc, Request, Response
from fastmmeval.tasks.task import Task

EXTRACT = "extract"  # the use name of a judge-assisted extraction's judgment

# (name, prompt, input): the name is the use (a judge metric's name, or EXTRACT) in `judge_calls`,
# the request id in what a judge is asked.
Use = tuple[str, JudgePrompt, JudgeInput]


def needs_judge(task: Task) -> bool:
    """Whether the task has judge metrics or a judge-assisted extractor (unused in ppl mode, and in a task
    that is not scored: its rules alone read the answers)."""
    judged_extract = task.extract is not None and task.config.extractor in JUDGE_ASSISTED
    return bool(task.metrics) and (any(m.judge for m in task.metrics) or judged_extract)


def judge_calls(task: Task, doc: Doc, request: Request, response: Response) -> list[Use]:
    """(use, prompt, input) for each judgment this answered doc needs: one per judge metric, and
    `extract` when the task's extraction rules could not read the answer."""
    case = JudgeInput(
        question=str(doc.fields.get("judge_question") or "\n".join(m.text for m in request.messages)),
        answer=response.text or "",
        reference=[str(doc.fields["judge_reference"])] if doc.fields.get("judge_reference") else task.targets(doc),
        criteria=str(doc.fields.get("criteria") or ""),
        options=task.options(doc),
        context=str(doc.fields.get("judge_context") or ""),
        images=tuple(request.images),
    )
    uses = [(m.name, PROMPTS.get(m.judge)) for m in task.metrics if m.judge]
    assisted = JUDGE_ASSISTED.get(task.config.extractor or "")
    if assisted is not None and task.extraction(doc, response).rule == UNPARSED:
        uses.insert(0, (EXTRACT, PROMPTS.get(assisted)))
    return [(use, prompt, case) for use, prompt in uses]


def judged_score(task: Task, doc: Doc, response: Response, verdicts: Mapping[str, Sequence[Verdict]]) -> dict[str, Any]:
    """`task.score` with the first judge's verdicts applied, plus `judgments` ({use: {judge:
    record}}, every judge's raw reply and value). A judge-matched option is extracted with rule
    `judge`; a judge that matched none leaves it `unparsed`; a failed judgment leaves the doc out of
    the metrics it decides (None), to be counted as a failed judgment."""
    first = {use: vs[0] for use, vs in verdicts.items()}
    extraction = None
    extract = first.get(EXTRACT)
    if extract is not None:
        if extract.error is not None:
            extraction = Extraction(None, "judge_failed")
        else:
            extraction = Extraction(extract.value, "judge" if extract.value is not None else UNPARSED)
            finish = JUDGE_FINISH.get(task.config.extractor or "")
            if finish is not None and extract.value is not None:
                found = finish(extract.value, task.options(doc), doc.fields)
                extraction = Extraction(found.value, f"judge+{found.rule}")
    values = {use: v.value for use, v in first.items() if use != EXTRACT and v.error is None}
    out = task.score(doc, response, extraction, values)
    if extraction is not None and extraction.rule == "judge_failed":
        out["metrics"] = dict.fromkeys(out["metrics"])
    out["judgments"] = {use: {v.judge: v.record() for v in vs} for use, vs in verdicts.items()}
    return out


class Judging:
    """The judgments of one batch of docs, in flight."""

    def __init__(self, keys: list[tuple[str, str]], asked: list[Future[list[Verdict]]]) -> None:
        self._keys = keys
        self._asked = asked

    def done(self) -> bool:
        """Whether every judge has answered."""
        return all(f.done() for f in self._asked)

    def result(self) -> dict[str, dict[str, list[Verdict]]]:
        """{doc id: {use: [verdict of each judge, first judge first]}} (waits for the judges)."""
        by_judge = [f.result() for f in self._asked]
        out: dict[str, dict[str, list[Verdict]]] = {}
        for k, (doc_id, use) in enumerate(self._keys):
            out.setdefault(doc_id, {})[use] = [verdicts[k] for verdicts in by_judge]
        return out


class _Worker:
    """One judge's background thread: it takes every batch waiting and asks them in one backend
    call, so docs are judged as soon as they are answered, concurrently under the backend's limits."""

    def __init__(self, judge: Judge) -> None:
        self.judge = judge
        self._queue: queue.Queue[tuple[list[Use], Future[list[Verdict]]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name=f"judge-{judge.name}", daemon=True)
        self._thread.start()

    def submit(self, calls: list[Use]) -> Future[list[Verdict]]:
        """The verdicts for `calls`, in order, once the judge has graded them."""
        future: Future[list[Verdict]] = Future()
        self._queue.put((calls, future))
        return future

    def _loop(self) -> None:
        stop = False
        while not stop:
            waiting = [self._queue.get()]
            while not self._queue.empty():
                waiting.append(self._queue.get_nowait())
            stop = None in waiting
            work = [w for w in waiting if w is not None]
            if not work:
                continue
            try:
                verdicts = self.judge.ask([call for calls, _ in work for call in calls])
            except BaseException as e:  # Judge.ask turns backend failures into verdicts: this is a bug
                for _, future in work:
                    future.set_exception(e)
                continue
            start = 0
            for calls, future in work:
                future.set_result(verdicts[start : start + len(calls)])
                start += len(calls)

    def close(self) -> None:
        """Finish the batches queued so far, then stop."""
        self._queue.put(None)
        self._thread.join()


class JudgePanel:
    """The run's judges, each with a background worker: `submit` returns at once, and the judges
    grade while the caller goes on (e.g. the model answers the next batch)."""

    def __init__(self, judges: list[Judge]) -> None:
        if not judges:
            raise ValueError("a JudgePanel needs at least one judge")
        self.judges = judges
        self._workers = [_Worker(j) for j in judges]

    def submit(self, calls: list[tuple[str, str, JudgePrompt, JudgeInput]]) -> Judging:
        """Ask every judge each (doc id, use, prompt, input), in the background."""
        asked = [w.submit([(f"{d}/{u}", p, c) for d, u, p, c in calls]) for w in self._workers]
        return Judging([(d, u) for d, u, _, _ in calls], asked)

    def usage(self) -> dict[str, Any]:
        """Token usage (and cost) of each judge's backend that reports some, by judge name."""
        return {j.name: used for j in self.judges if (used := j.model.usage())}

    def fingerprints(self) -> dict[str, Any]:
        """Each judge's fingerprint by name, for the run manifest."""
        return {j.name: j.fingerprint() for j in self.judges}

    def close(self) -> None:
        """Wait for judgments in flight and stop the workers."""
        for worker in self._workers:
            worker.close()
