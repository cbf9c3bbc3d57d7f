"""Metrics: per-doc scores and their aggregation, registered by name."""

from fastmmeval.metrics import match as _match  # noqa: F401  (registers the built-in metrics)
from fastmmeval.metrics.base import METRICS, Metric, mean_with_stderr, summarize

__all__ = ["METRICS", "Metric", "mean_with_stderr", "summarize"]
