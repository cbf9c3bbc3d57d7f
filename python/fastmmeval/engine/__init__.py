"""In-process continuous batching for transformers causal LMs (after nano-vllm).

`Engine.step()` = schedule -> run -> postprocess: every step the running sequences decode one
token together, finished ones leave, and waiting ones are prefilled together and join.

`sequence`, `scheduler` and `kv_cache` are torch-free bookkeeping; `runner` and `engine` hold the
torch part and are imported from their modules (`fastmmeval.engine.engine.Engine`).
"""

from fastmmeval.engine.kv_cache import CacheLayout
from fastmmeval.engine.scheduler import ScheduledStep, Scheduler
from fastmmeval.engine.sequence import FinishReason, Sequence, Status

__all__ = ["CacheLayout", "FinishReason", "ScheduledStep", "Scheduler", "Sequence", "Status"]
