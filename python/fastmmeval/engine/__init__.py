"""In-process continuous batching for transformers causal LMs, text-only or vision-language
(after nano-vllm).

`Engine.step()` = schedule -> run -> postprocess: every step the running sequences decode one
token together, finished ones leave, and waiting ones are prefilled together and join. What a
prefill feeds the model (image tensors, M-RoPE positions) comes from the model adapter's prefill
builder; the engine itself knows only token ids and per-row positions.

`sequence`, `scheduler` and `kv_cache` are torch-free bookkeeping; `runner` and `engine` hold the
torch part and are imported from their modules (`fastmmeval.engine.engine.Engine`).
"""

from fastmmeval.engine.kv_cache import CacheLayout
from fastmmeval.engine.scheduler import ScheduledStep, Scheduler
from fastmmeval.engine.sequence import FinishReason, Sequence, Status

__all__ = ["CacheLayout", "FinishReason", "ScheduledStep", "Scheduler", "Sequence", "Status"]
