"""Greedy k-center on the GPU: one fused distance/min/argmax kernel per step, no host sync per step.

Each step runs two launches. `_step_kernel` reads the newest center's index from device memory,
computes every row's squared distance to that center (fp32 accumulation over fp16 or fp32 rows),
lowers the running minimum in place and writes each block's (max, argmax). `_pick_kernel` reduces
the per-block results, appends the next center's index to `centers` (where the next step reads it)
and marks that row as chosen (running minimum -1, so it is never picked again). Ties go to the
lowest row index. `kcenter_step_reference` is the torch twin of one step.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_N = 32  # rows per program of the step kernel
BLOCK_D = 128  # columns loaded per iteration
PICK_BLOCK = 1024  # per-block results reduced per iteration of the pick kernel


@triton.jit(do_not_specialize=["step"])
def _step_kernel(x_ptr, min_ptr, centers_ptr, block_max_ptr, block_arg_ptr, step, n, d, stride,
                 BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n
    row_base = rows.to(tl.int64) * stride
    center_base = tl.load(centers_ptr + step).to(tl.int64) * stride
    # A 2-D accumulator keeps the loop to loads and FMAs; rows are summed across lanes once, at the end.
    acc = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    for j in range(0, d, BLOCK_D):
        cols = j + tl.arange(0, BLOCK_D)
        col_ok = cols < d
        c = tl.load(x_ptr + center_base + cols, mask=col_ok, other=0.0).to(tl.float32)
        xb = tl.load(x_ptr + row_base[:, None] + cols[None, :], mask=row_ok[:, None] & col_ok[None, :],
                     other=0.0).to(tl.float32)
        diff = xb - c[None, :]
        acc += diff * diff
    # Chosen rows hold -1 and keep it (distances are >= 0); rows past n read as -1 and are not stored.
    m = tl.minimum(tl.load(min_ptr + rows, mask=row_ok, other=-1.0), tl.sum(acc, axis=1))
    tl.store(min_ptr + rows, m, mask=row_ok)
    best = tl.argmax(m, axis=0, tie_break_left=True)
    tl.store(block_max_ptr + pid, tl.max(m, axis=0))
    tl.store(block_arg_ptr + pid, pid.to(tl.int64) * BLOCK_N + best)


@triton.jit(do_not_specialize=["step"])
def _pick_kernel(block_max_ptr, block_arg_ptr, min_ptr, centers_ptr, step, n_blocks, BLOCK: tl.constexpr):
    lanes = tl.arange(0, BLOCK)
    best_val = tl.full([BLOCK], -2.0, tl.float32)
    best_blk = tl.zeros([BLOCK], dtype=tl.int32)
    for start in range(0, n_blocks, BLOCK):
        blk = start + lanes
        val = tl.load(block_max_ptr + blk, mask=blk < n_blocks, other=-2.0)
        take = val > best_val  # strict: a lane keeps its earlier (lower) block on ties
        best_blk = tl.where(take, blk, best_blk)
        best_val = tl.where(take, val, best_val)
    top = tl.max(best_val, axis=0)
    blk = tl.min(tl.where(best_val == top, best_blk, n_blocks), axis=0)
    row = tl.load(block_arg_ptr + blk)
    tl.store(centers_ptr + step + 1, row)
    tl.store(min_ptr + row, -1.0)


class KCenterState:
    """Device buffers of one greedy k-center run over the rows of `x` (fp16 or fp32, 2-D, contiguous)."""

    def __init__(self, x: torch.Tensor, k: int, first: int) -> None:
        n = x.shape[0]
        self.x = x
        self.n_blocks = triton.cdiv(n, BLOCK_N)
        self.min_d2 = torch.full((n,), float("inf"), dtype=torch.float32, device=x.device)
        self.min_d2[first] = -1.0
        self.centers = torch.empty(k, dtype=torch.int64, device=x.device)
        self.centers[0] = first
        self.block_max = torch.empty(self.n_blocks, dtype=torch.float32, device=x.device)
        self.block_arg = torch.empty(self.n_blocks, dtype=torch.int64, device=x.device)

    def step(self, step: int) -> None:
        """Lower the running minimum by centers[step] and write centers[step + 1] (both on the device)."""
        n, d = self.x.shape
        _step_kernel[(self.n_blocks,)](self.x, self.min_d2, self.centers, self.block_max, self.block_arg, step,
                                       n, d, self.x.stride(0), BLOCK_N=BLOCK_N, BLOCK_D=BLOCK_D, num_warps=4)
        _pick_kernel[(1,)](self.block_max, self.block_arg, self.min_d2, self.centers, step, self.n_blocks,
                           BLOCK=PICK_BLOCK, num_warps=4)


def greedy_k_center_triton(x: torch.Tensor, k: int, first: int) -> torch.Tensor:
    """Indices (int64 device tensor, pick order) of k rows of `x` picked by greedy k-center from `first`."""
    if x.ndim != 2 or not x.is_contiguous() or x.dtype not in (torch.float16, torch.float32):
        raise ValueError("greedy_k_center_triton: x must be a contiguous 2-D float16 or float32 tensor")
    if not 1 <= k <= x.shape[0] or not 0 <= first < x.shape[0]:
        raise ValueError(f"greedy_k_center_triton: need 1 <= k <= {x.shape[0]} and 0 <= first < {x.shape[0]}")
    state = KCenterState(x, k, first)
    for step in range(k - 1):
        state.step(step)
    return state.centers


def kcenter_step_reference(x: torch.Tensor, min_d2: torch.Tensor, center: int) -> tuple[torch.Tensor, int]:
    """One step in torch: the running minimum lowered by row `center` (chosen rows stay -1, `center`
    becomes -1) and the next center (farthest row, lowest index on ties)."""
    diff = x.float() - x[center].float()
    lowered = torch.minimum(min_d2, (diff * diff).sum(dim=1))
    lowered[center] = -1.0
    return lowered, int(torch.argmax(lowered))
