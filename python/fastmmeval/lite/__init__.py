"""Lite task sets: embed docs, pick a representative subset, export it and validate model rankings on it.

The API: `select(tasks, out, SelectOptions(...))` chooses and writes each task's subset (`select_task`
for one task), `validate(...)` checks that model rankings on the subsets follow the full tasks', and
`greedy_k_center` is the coreset algorithm itself (CPU, or a Triton kernel on CUDA)."""

from fastmmeval.lite.embed import embed_task, image_encoder, text_encoder
from fastmmeval.lite.export import Selection, SelectOptions, read_selection, select, select_task, write_selection
from fastmmeval.lite.kcenter import covering_radius, greedy_k_center
from fastmmeval.lite.validate import Thresholds, validate

__all__ = [
    "SelectOptions", "Selection", "Thresholds", "covering_radius", "embed_task", "greedy_k_center", "image_encoder",
    "read_selection", "select", "select_task", "text_encoder", "validate", "write_selection",
]  # fmt: skip
