"""Model backends, registered by name in MODELS (heavy imports happen when one is built)."""

from fastmmeval.models import socratic as _socratic  # noqa: F401  (registers `socratic`)
from fastmmeval.models.base import MODELS, Model, parse_model_args

__all__ = ["MODELS", "Model", "parse_model_args"]
