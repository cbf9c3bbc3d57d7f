"""Metrics: per-doc scores and their aggregation, registered by name."""

from fastmmeval.metrics import caption as _caption  # noqa: F401  (registers cider, bleu_1..4, rouge_l, meteor)
from fastmmeval.metrics import circular as _circular  # noqa: F401  (registers circular_accuracy)
from fastmmeval.metrics import judged as _judged  # noqa: F401  (registers judge_score)
from fastmmeval.metrics import likelihood as _likelihood  # noqa: F401  (registers acc, acc_norm)
from fastmmeval.metrics import match as _match  # noqa: F401  (registers the built-in metrics)
from fastmmeval.metrics import vqa as _vqa  # noqa: F401  (registers the VQA, ANLS and ChartQA metrics)
from fastmmeval.metrics.aggregate import overall_score
from fastmmeval.metrics.base import JUDGE_VERDICT, METRICS, Metric, mean_with_stderr, summarize

__all__ = ["JUDGE_VERDICT", "METRICS", "Metric", "mean_with_stderr", "overall_score", "summarize"]
