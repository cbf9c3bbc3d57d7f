"""A runnable task: its docs, the request for each doc, and the score of each response."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, TypeVar

from fastmmeval.errors import ConfigError, DocError, FailureKind
from fastmmeval.extract import EXTRACTORS, Extraction
from fastmmeval.extract.rules import LETTERS
from fastmmeval.images import DEFAULT_MAX_PIXELS, bound_decoders
from fastmmeval.metrics import JUDGE_VERDICT, METRICS, Metric
from fastmmeval.metrics.likelihood import LIKELIHOOD_METRICS, OPTION_LIKELIHOODS, OptionLikelihoods
from fastmmeval.protocol import Doc, GenerationSettings, Request, Response
from fastmmeval.tasks import families as _families  # noqa: F401  (registers benchmark processors)
from fastmmeval.tasks.config import TaskConfig, ppl_messages
from fastmmeval.tasks.processors import DOC_PROCESSORS, PROCESSOR_DATA
from fastmmeval.tasks.render import format_options, render_messages
from fastmmeval.tasks.sources import Rows, load_rows
from fastmmeval.tasks.submission import SUBMISSION_FORMATS

T = TypeVar("T")

# The category of a doc without a value in a `breakdown` field.
NO_CATEGORY = "(none)"


@dataclass(frozen=True)
class DocRef:
    """A doc's position and id, known before its fields (and images) are loaded."""

    index: int
    id: str


class Task:
    """One task file bound to its data, extractor and metrics. `max_image_pixels` (None: no cap) and
    `allow_absolute_image_paths` are run settings for its images, not protocol: the fingerprint leaves
    them out. A multiple-choice task in ppl mode reports `acc` and `acc_norm` (its ppl headline first),
    then its own metrics scored on the headline's pick. With `predict_only` (a run setting) or a
    `submission` format (a split without public answers) it has no metrics: its docs are answered,
    not scored."""

    def __init__(
        self,
        config: TaskConfig,
        max_image_pixels: int | None = DEFAULT_MAX_PIXELS,
        allow_absolute_image_paths: bool = False,
        predict_only: bool = False,
    ) -> None:
        self.config = config
        self.max_image_pixels = max_image_pixels
        bound_decoders(max_image_pixels)  # hub rows arrive decoded by `datasets`
        self.allow_absolute_image_paths = allow_absolute_image_paths or config.dataset.allow_absolute_paths
        self.name = config.task
        keys = config.metric_keys or config.metrics
        self.metrics: list[Metric] = [
            replace(METRICS.get(m), name=k) for m, k in zip(config.metrics, keys, strict=True)
        ]
        # Per metric: the filter name of its result keys and the factor its values are reported at.
        self.metric_filters = config.metric_filters or ("none",) * len(self.metrics)
        self.metric_scales = config.metric_scales or (1.0,) * len(self.metrics)
        if any(m in LIKELIHOOD_METRICS for m in config.metrics):
            raise ConfigError(f"{config.source_file}: field 'metrics': acc and acc_norm are not listed, ppl mode "
                              "reports them itself")
        self.ppl = config.output_type == "multiple_choice" and config.mc_mode == "ppl"
        self.messages = ppl_messages(config) if self.ppl else config.doc_to_messages
        # The registered name of the headline metric (results.json's headline_metric).
        self.headline_metric = config.ppl.headline if self.ppl else next(iter(config.metrics), None)
        if self.ppl:
            taken = [m.name for m in self.metrics if m.name in LIKELIHOOD_METRICS]
            if taken:
                raise ConfigError(f"{config.source_file}: result key {taken[0]} is taken by ppl mode's own metric")
            order = LIKELIHOOD_METRICS if self.headline_metric == LIKELIHOOD_METRICS[0] else LIKELIHOOD_METRICS[::-1]
            self.metrics = [METRICS.get(name) for name in order] + self.metrics
            self.metric_filters = ("none",) * len(order) + tuple(self.metric_filters)
            self.metric_scales = (1.0,) * len(order) + tuple(self.metric_scales)
        self.process = DOC_PROCESSORS.get(config.process_doc) if config.process_doc else None
        self.extract = EXTRACTORS.get(config.extractor) if config.extractor and not self.ppl else None
        if config.output_type == "generate" and self.extract is None:
            raise ConfigError(f"{config.source_file}: generate tasks need an `extractor` (e.g. raw)")
        self.submission = SUBMISSION_FORMATS.get(config.submission) if config.submission else None
        if predict_only or self.submission is not None:  # answers are kept, not scored: no targets are read
            self.metrics, self.headline_metric = [], None

    @cached_property
    def rows(self) -> Rows:
        """The dataset split, loaded on first use."""
        return load_rows(self.config.dataset, self.config.split)

    def fingerprint(self) -> str:
        """The protocol fingerprint (data identity included once the data is loaded), and the names of
        the other hub data its `process_doc` reads (e.g. GQA's image config)."""
        from hashlib import sha256

        blob = f"{self.config.fingerprint()}|{sorted(self.rows.identity.items())}"
        extra = PROCESSOR_DATA.get(self.config.process_doc or "")
        if extra:
            blob += f"|{[(sorted(spec.identity().items()), split) for spec, split in extra]}"
        return sha256(blob.encode()).hexdigest()[:16]

    def protocol(self) -> dict[str, Any]:
        """What `fingerprint` hashes, as a mapping: the config's `protocol()`, the loaded data's identity
        under `data` and the other hub data its `process_doc` reads under `process_doc_data`."""
        out = {**self.config.protocol(), "data": dict(self.rows.identity)}
        extra = PROCESSOR_DATA.get(self.config.process_doc or "")
        if extra:
            out["process_doc_data"] = [{**spec.identity(), "split": split} for spec, split in extra]
        return out

    def doc_refs(self, limit: int | None = None) -> list[DocRef]:
        """The first `limit` docs (all when None), in dataset order; only those of the config's
        `doc_ids` when it lists some (a subset task)."""
        subset = self.config.doc_ids
        rows = self._kept_rows()
        n = len(rows) if limit is None or subset is not None else min(limit, len(rows))
        if self.config.doc_id is None:
            refs = [DocRef(i, str(i)) for i in rows[:n]]
        else:
            ids = self.rows.column(self.config.doc_id)
            refs = []
            for i in rows[:n]:
                if ids[i] is None:
                    raise DocError(f"task {self.name}, row {i}: missing doc id field {self.config.doc_id!r}")
                refs.append(DocRef(i, str(ids[i])))
            if len({r.id for r in refs}) != len(refs):
                raise ConfigError(f"task {self.name}: doc ids in field {self.config.doc_id!r} are not unique")
        if subset is None:
            return refs
        wanted = set(subset)
        refs = [r for r in refs if r.id in wanted]
        if len(refs) != len(wanted):
            missing = sorted(wanted - {r.id for r in refs})
            raise ConfigError(
                f"{self.config.source_file}: {len(missing)} listed doc id(s) not in task "
                f"{self.name}'s data, e.g. {', '.join(missing[:3])}"
            )
        return refs if limit is None else refs[:limit]

    def _kept_rows(self) -> list[int]:
        """Indices of the rows that pass the config's `where` conditions (all rows without any)."""
        keep = list(range(len(self.rows)))
        for field_name, wanted in self.config.where:
            column = self.rows.column(field_name)
            keep = [i for i in keep if column[i] is not None and str(column[i]) == wanted]
        return keep

    def doc(self, ref: DocRef) -> Doc:
        """The full doc: the row's fields, plus those its `process_doc` function derives."""
        where = f"task {self.name}, doc {ref.id}"
        try:
            fields = self.rows[ref.index]
        except DocError as e:
            raise e.at(where) from None
        if self.process is not None:
            try:
                fields = {**fields, **self.process(fields)}
            except DocError as e:
                raise e.at(where) from None
            except (KeyError, TypeError, ValueError) as e:
                raise DocError(
                    f"{where}: {self.config.process_doc} cannot read the row: {type(e).__name__}: {e}"
                ) from None
        return Doc(self.name, ref.id, ref.index, fields)

    def check_breakdown(self, limit: int | None = None) -> None:
        """Refuse a `breakdown` field that the task's first doc (its fields after `process_doc`) lacks, before
        any model time is spent. A first doc that cannot be read is not checked: its failure is recorded when
        it runs."""
        refs = self.doc_refs(limit) if self.config.breakdown and self.metrics else []
        if not refs:
            return
        try:
            fields = self.doc(refs[0]).fields
        except DocError:
            return
        for name in self.config.breakdown:
            if name not in fields:
                raise ConfigError(
                    f"{self.config.breakdown_where}: field 'breakdown': {name!r} is not a field of task {self.name}'s "
                    f"docs (they have {', '.join(sorted(fields))})"
                )

    def categories(self, doc: Doc) -> dict[str, str]:
        """The doc's category under each `breakdown` field: the field's value as text (NO_CATEGORY when null)."""
        return {
            name: NO_CATEGORY if doc.fields.get(name) is None else str(doc.fields[name])
            for name in self.config.breakdown
        }

    def where(self, doc: Doc) -> str:
        """How errors name a doc."""
        return f"task {self.name}, doc {doc.id}"

    def options(self, doc: Doc) -> list[str]:
        """The option texts of a multiple-choice doc."""
        if self.config.choices is None:
            return []
        value = doc.fields.get(self.config.choices)
        if not isinstance(value, (list, tuple)) or not value:
            raise DocError(f"{self.where(doc)}: field {self.config.choices!r} must be a non-empty list of options")
        return [str(v) for v in value]

    def targets(self, doc: Doc) -> list[str]:
        """Acceptable answers: option letters for multiple choice, strings otherwise."""
        if self.config.target not in doc.fields:
            where = self.where(doc)
            raise DocError(f"{where}: missing target field {self.config.target!r}", FailureKind.MISSING_TARGET)
        value = doc.fields[self.config.target]
        values = [v for v in value if v is not None] if isinstance(value, (list, tuple)) else [value]
        if value is None or not values:  # null would otherwise be scored as the answer "None"
            where = self.where(doc)
            raise DocError(f"{where}: target field {self.config.target!r} holds no answer", FailureKind.MISSING_TARGET)
        if self.config.output_type == "multiple_choice":
            return [self._target_letter(doc, value)]
        return [str(v) for v in values]

    def _target_letter(self, doc: Doc, value: Any) -> str:
        options = self.options(doc)
        letters = LETTERS[: len(options)]
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(options):
            return letters[value]
        if isinstance(value, str) and value.strip() in letters:
            return value.strip()
        if isinstance(value, str) and value in options:
            return letters[options.index(value)]
        raise DocError(f"{self.where(doc)}: target {value!r} is not an option letter, index or option text")

    def request(self, doc: Doc, seed: int) -> Request:
        """The request for one doc (images decoded); bad fields raise DocError."""
        where = self.where(doc)
        fields = dict(doc.fields)
        options = self.options(doc)
        if options:  # in a multiple-choice prompt, `{options}` is always the lettered list
            fields["options"] = format_options(options)
        if self.ppl and not all(options):
            raise DocError(f"{where}: option {LETTERS[options.index('')]} is empty: ppl mode scores each option's text")
        messages = render_messages(
            self.messages,
            fields,
            self.rows.image_root,
            where,
            self.max_image_pixels,
            self.allow_absolute_image_paths,
        )
        if self.metrics:
            self.targets(doc)  # a doc without a usable target fails before it costs model time
        generation: GenerationSettings = replace(self.config.generation, seed=seed + doc.index)
        if self.ppl:
            continuations = tuple(self.config.ppl.target_delimiter + o for o in options)
            return Request(f"{self.name}/{doc.id}", "loglikelihood", messages, generation, continuations)
        return Request(f"{self.name}/{doc.id}", "generate", messages, generation)

    def _named(self, doc: Doc, step: Callable[[], T]) -> T:
        """Run an extractor or metric; its DocErrors get this doc's name in front."""
        try:
            return step()
        except DocError as e:
            where = self.where(doc)
            raise (e if str(e).startswith(where) else e.at(where)) from None

    def likelihoods(self, doc: Doc, response: Response) -> OptionLikelihoods:
        """The options' log-probabilities in a loglikelihood response, beside their texts."""
        assert response.logprobs is not None
        return OptionLikelihoods(tuple(response.logprobs), tuple(self.options(doc)))

    def extraction(self, doc: Doc, response: Response) -> Extraction:
        """The answer the task's rules read from a successful response; in ppl mode the option its headline
        picks (`loglikelihood_argmax` for acc, `loglikelihood_argmax_per_byte` for acc_norm)."""
        if response.logprobs is not None:
            per_byte = self.config.ppl.headline == "acc_norm"
            best = self._named(doc, lambda: self.likelihoods(doc, response).best(per_byte))
            return Extraction(LETTERS[best], "loglikelihood_argmax" + ("_per_byte" if per_byte else ""))
        assert self.extract is not None and response.text is not None
        return self._named(doc, lambda: self.extract(response.text, self.options(doc), doc.fields))

    def predict(self, doc: Doc, response: Response) -> dict[str, Any]:
        """What an unscored doc's sample keeps of a successful response: the answer the task's rules
        read and, for a submission task, the doc's entry of the submission file."""
        extraction = self.extraction(doc, response)
        out: dict[str, Any] = {"extracted": extraction.value, "extract_rule": extraction.rule}
        if self.submission is not None:
            entry = self.submission.entry
            out["submission"] = self._named(doc, lambda: entry(doc.fields, response.text, extraction))
        return out

    def score(
        self,
        doc: Doc,
        response: Response,
        extraction: Extraction | None = None,
        verdicts: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Extraction and per-doc metric values for a successful response. `extraction` replaces
        the rules' (e.g. a judge decided it); `verdicts` holds, by metric name, the judge's verdict
        value for each judge metric: a judge metric without one is None for this doc (a failed
        judgment, left out of its score)."""
        targets = self.targets(doc)
        extraction = extraction or self.extraction(doc, response)
        fields = doc.fields
        if response.logprobs is not None:
            fields = {**fields, OPTION_LIKELIHOODS: self.likelihoods(doc, response)}
        verdicts = verdicts or {}

        def value(m: Metric) -> Any:
            if m.judge is None:
                return m.score(extraction.value, targets, fields)
            verdict = verdicts.get(m.name)
            return None if verdict is None else m.score(extraction.value, targets, {**fields, JUDGE_VERDICT: verdict})

        values = self._named(doc, lambda: {m.name: value(m) for m in self.metrics})
        if any(isinstance(v, float) and not math.isfinite(v) for v in values.values()):
            raise DocError(f"{self.where(doc)}: a metric returned a non-finite value: {values}")
        return {"target": targets, "extracted": extraction.value, "extract_rule": extraction.rule, "metrics": values}
