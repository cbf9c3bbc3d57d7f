"""Model backends, registered by name in MODELS."""

from fastmmeval.models.base import MODELS, Model, parse_model_args

__all__ = ["MODELS", "Model", "parse_model_args"]
