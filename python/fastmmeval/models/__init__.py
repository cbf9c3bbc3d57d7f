"""Model backends, registered by name in MODELS (heavy imports happen when one is built)."""

from fastmmeval.models.api import anthropic_api as _anthropic_api  # noqa: F401  (registers `anthropic`)
from fastmmeval.models.api import openai_api as _openai_api  # noqa: F401  (registers `openai`)
from fastmmeval.models.base import MODELS, Model, parse_model_args
from fastmmeval.models.local import hf as _hf  # noqa: F401  (registers `hf`)
from fastmmeval.models.local import vllm_backend as _vllm_backend  # noqa: F401  (registers `vllm`)
from fastmmeval.models.socratic import socratic as _socratic  # noqa: F401  (registers `socratic`)

__all__ = ["MODELS", "Model", "parse_model_args"]
