"""The engine loop: step() = schedule -> run -> postprocess, until every sequence is done."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import torch

from fastmmeval.engine.runner import PrefillBuilder, Runner
from fastmmeval.engine.sampling import choose_token, cut_at_stop
from fastmmeval.engine.scheduler import Scheduler
from fastmmeval.engine.sequence import Sequence, Status
from fastmmeval.protocol import GenerationSettings

K = TypeVar("K")


class Engine:
    """Continuous batching over a transformers causal LM, text-only or vision-language: the model
    adapter's `build_prefill` turns a group of new sequences into the model's prefill inputs
    (`runner.token_prefill` for plain token prompts).

    Each step the running sequences decode one token together, finished ones leave, and waiting
    ones (admitted by `Scheduler`) are prefilled together and join. A sequence stops at any of
    `eos_ids`, at the first of its stop strings in `decode(output_ids)`, or at max_new_tokens;
    it is greedy at temperature 0, else sampled from its own generator seeded with its seed."""

    def __init__(self, model: Any, eos_ids: set[int], decode: Callable[[list[int]], str],
                 build_prefill: PrefillBuilder, max_batch_size: int = 16, max_batch_tokens: int = 4096) -> None:
        self.scheduler = Scheduler(max_batch_size, max_batch_tokens)
        self.runner = Runner(model, build_prefill)
        self.eos_ids = set(eos_ids)
        self.decode = decode
        self._next_id = 0
        self._generators: dict[int, torch.Generator] = {}

    def add(self, prompt_ids: list[int], settings: GenerationSettings, inputs: Any = None) -> Sequence:
        """Queue a prompt (with the prefill builder's other `inputs` for it, if any); a sequence
        allowed no new tokens finishes at once with empty text."""
        seq = Sequence(self._next_id, list(prompt_ids), settings, inputs)
        self._next_id += 1
        if settings.max_new_tokens <= 0:
            seq.finish("length", "")
            return seq
        if settings.temperature > 0:
            self._generators[seq.seq_id] = torch.Generator().manual_seed(settings.seed)
        self.scheduler.add(seq)
        return seq

    def step(self) -> list[Sequence]:
        """Decode the running sequences one token, prefill the admitted ones, and return those
        that finished."""
        step = self.scheduler.schedule()
        chosen: list[tuple[Sequence, int]] = []
        if step.decode:
            chosen += zip(step.decode, self._choose(step.decode, self.runner.decode(step.decode)), strict=True)
        if step.prefill:
            chosen += zip(step.prefill, self._choose(step.prefill, self.runner.prefill(step.prefill)), strict=True)
        finished = [seq for seq, token in chosen if self._postprocess(seq, token)]
        if finished:
            self.scheduler.free(finished)
            self.runner.release([s.seq_id for s in finished])
            for seq in finished:
                self._generators.pop(seq.seq_id, None)
        return finished

    def _choose(self, seqs: list[Sequence], logits: torch.Tensor) -> list[int]:
        tokens = logits.argmax(-1).tolist()
        for row, seq in enumerate(seqs):
            generator = self._generators.get(seq.seq_id)
            if generator is not None:
                tokens[row] = choose_token(logits[row], seq.settings, generator)
        return tokens

    def _postprocess(self, seq: Sequence, token: int) -> bool:
        """Append `token` to `seq` or finish it; returns whether it finished."""
        if token in self.eos_ids:
            seq.finish("eos", self.decode(seq.output_ids))
            return True
        seq.output_ids.append(token)
        if seq.settings.stop:
            text = self.decode(seq.output_ids)
            cut = cut_at_stop(text, seq.settings.stop)
            if cut is not None:
                seq.finish("stop", cut)
                return True
        if len(seq.output_ids) >= seq.settings.max_new_tokens:
            seq.finish("length", self.decode(seq.output_ids))
            return True
        return False

    def generate(self, prompts: Iterable[tuple[list[int], GenerationSettings, Any]]) -> list[Sequence]:
        """Run the (prompt ids, settings, other prefill inputs) to completion; one finished
        Sequence per prompt, in order. On failure every queued or running sequence is dropped and
        the engine is left empty."""
        if self.scheduler.has_unfinished():
            raise RuntimeError("generate needs an idle engine")
        seqs = [self.add(ids, settings, inputs) for ids, settings, inputs in prompts]
        try:
            while self.scheduler.has_unfinished():
                self.step()
        except BaseException:
            self.clear()
            raise
        return seqs

    def stream(self, prompts: Iterable[tuple[K, list[int], GenerationSettings, Any]],
               window: int) -> Iterator[tuple[K, Sequence | Exception]]:
        """Run (key, prompt ids, settings, other prefill inputs) taken from `prompts` as they are
        needed, keeping up to `window` of them queued beside the running ones, so the batch stays
        full for as long as prompts come; yields (key, finished Sequence) as each finishes, in
        finishing order. When a step fails, each sequence it ran is run again alone and only those
        that fail alone are yielded as their exception; queued ones are unaffected."""
        if self.scheduler.has_unfinished():
            raise RuntimeError("stream needs an idle engine")
        source = iter(prompts)
        owned: dict[int, tuple[K, tuple[list[int], GenerationSettings, Any]]] = {}
        exhausted = False
        try:
            while True:
                while not exhausted and len(self.scheduler.waiting) < window:
                    item = next(source, None)
                    if item is None:
                        exhausted = True
                        break
                    key, prompt = item[0], item[1:]
                    seq = self.add(*prompt)
                    if seq.is_finished:
                        yield key, seq
                    else:
                        owned[seq.seq_id] = (key, prompt)
                if not self.scheduler.has_unfinished():
                    return
                try:
                    finished = self.step()
                except Exception:
                    ran = [owned.pop(s.seq_id) for s in self.scheduler.running]
                    queued = [owned.pop(s.seq_id) for s in self.scheduler.waiting]
                    self.clear()
                    for key, prompt in ran:
                        yield key, self._alone(prompt)
                    for key, prompt in queued:
                        owned[self.add(*prompt).seq_id] = (key, prompt)
                    continue
                for seq in finished:
                    yield owned.pop(seq.seq_id)[0], seq
        finally:
            if self.scheduler.has_unfinished():  # the consumer stopped early
                self.clear()

    def _alone(self, prompt: tuple[list[int], GenerationSettings, Any]) -> Sequence | Exception:
        try:
            return self.generate([prompt])[0]
        except Exception as e:
            return e

    def abort(self, seq: Sequence) -> None:
        """Stop a queued or running sequence early (its caller gave up): it finishes as "abort"
        with the text so far, and its row of the batched cache is freed."""
        if seq.is_finished:
            return
        running = seq.status is Status.RUNNING
        seq.finish("abort", self.decode(seq.output_ids))
        self.scheduler.free([seq])
        if running:
            self.runner.release([seq.seq_id])
        self._generators.pop(seq.seq_id, None)

    def clear(self) -> None:
        """Drop every queued or running sequence, leaving the engine empty."""
        self.scheduler.clear()
        self.runner.clear()
        self._generators.clear()
