"""Greedy k-center: the native CPU path (fp16 and fp32 storage, AVX2 and portable loops) and the Triton
kernel (run by Triton's interpreter, see conftest.py) against the float64 numpy reference."""

from __future__ import annotations

import os
import subprocess
import sys
from types import ModuleType

import numpy as np
import pytest
import torch

from fastmmeval import _core
from fastmmeval.errors import ConfigError
from fastmmeval.lite.kcenter import (
    FeatureError,
    covering_radius,
    first_center,
    greedy_k_center,
    greedy_k_center_reference,
)


def clustered(n: int, d: int, clusters: int = 8, spread: float = 6.0, seed: int = 0) -> np.ndarray:
    """Gaussian blobs around `clusters` random centers (float32)."""
    rng = np.random.default_rng(seed)
    means = rng.standard_normal((clusters, d)) * spread
    return (means[rng.integers(clusters, size=n)] + rng.standard_normal((n, d))).astype(np.float32)


@pytest.fixture
def tk() -> ModuleType:
    """The Triton kernel module (imported after conftest.py turned on the interpreter)."""
    pytest.importorskip("triton")
    import fastmmeval.triton_kernels.kcenter as module

    return module


def native(x: np.ndarray, k: int, seed: int, *, float16: bool, simd: bool, threads: int = 0) -> np.ndarray:
    return _core.greedy_k_center(x, k, first_center(len(x), seed), float16=float16, threads=threads, simd=simd)


def triton(tk: ModuleType, x: np.ndarray, k: int, seed: int, dtype: torch.dtype) -> np.ndarray:
    return tk.greedy_k_center_triton(torch.from_numpy(x).to(dtype), k, first_center(len(x), seed)).numpy()


@pytest.mark.parametrize("simd", [True, False], ids=["simd", "portable"])
@pytest.mark.parametrize("d", [1, 7, 37, 64])
def test_fp32_native_picks_the_reference_centers(simd: bool, d: int) -> None:
    x = clustered(600, d, seed=d)
    expected = greedy_k_center_reference(x, 40, seed=3)
    np.testing.assert_array_equal(native(x, 40, 3, float16=False, simd=simd), expected)


@pytest.mark.parametrize("simd", [True, False], ids=["simd", "portable"])
def test_fp16_native_picks_the_centers_of_the_reference_on_fp16_rounded_data(simd: bool) -> None:
    x = clustered(700, 45)
    twin = greedy_k_center_reference(x.astype(np.float16), 50, seed=1)
    np.testing.assert_array_equal(native(x, 50, 1, float16=True, simd=simd), twin)
    np.testing.assert_array_equal(native(x.astype(np.float16), 50, 1, float16=True, simd=simd), twin)


@pytest.mark.parametrize("storage", ["float16", "float32"])
def test_every_cpu_path_covers_as_well_as_the_reference(storage: str) -> None:
    x = clustered(3000, 200, clusters=20)
    ref = covering_radius(x, greedy_k_center_reference(x, 60, seed=5))
    ours = greedy_k_center(x, 60, seed=5, storage=storage)
    assert len(set(ours.tolist())) == 60
    assert covering_radius(x, ours) == pytest.approx(ref, rel=1e-3)


def test_two_threads_pick_what_one_thread_picks() -> None:
    x = clustered(3000, 200)  # 600k values: enough to split a pass across threads
    for float16 in (True, False):
        one = native(x, 30, 0, float16=float16, simd=True, threads=1)
        np.testing.assert_array_equal(native(x, 30, 0, float16=float16, simd=True, threads=2), one)


def tied_points() -> np.ndarray:
    """Small integers: every distance is exact in fp16, fp32 and fp64, so ties are real ties."""
    return np.random.default_rng(0).integers(0, 3, size=(80, 5)).astype(np.float32)


def test_exact_ties_go_to_the_lowest_index_on_every_cpu_path() -> None:
    x = tied_points()
    expected = greedy_k_center_reference(x, 80, seed=2)
    assert sorted(expected.tolist()) == list(range(80))
    for float16 in (True, False):
        for simd in (True, False):
            np.testing.assert_array_equal(native(x, 80, 2, float16=float16, simd=simd), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_exact_ties_go_to_the_lowest_index_in_the_triton_kernel(tk: ModuleType, dtype: torch.dtype) -> None:
    x = tied_points()
    np.testing.assert_array_equal(triton(tk, x, 80, 2, dtype), greedy_k_center_reference(x, 80, seed=2))


def test_duplicate_points_are_each_picked_once_and_cover_with_radius_zero() -> None:
    base = clustered(10, 9)
    x = np.concatenate([base, base, base[:4]])
    centers = greedy_k_center(x, 10, seed=0)
    assert covering_radius(x, centers) == 0.0
    assert sorted(greedy_k_center(x, len(x), seed=0).tolist()) == list(range(len(x)))


def test_small_and_out_of_range_sizes() -> None:
    x = clustered(5, 3)
    assert greedy_k_center(x, 1, seed=7).tolist() == [first_center(5, 7)]
    assert greedy_k_center(x[:1], 1).tolist() == [0]
    assert covering_radius(x, greedy_k_center(x, 5)) == 0.0
    with pytest.raises(ConfigError, match=r"k must be an integer in 1\.\.5"):
        greedy_k_center(x, 6)
    with pytest.raises(ConfigError, match="got 0"):
        greedy_k_center(x, 0)
    with pytest.raises(ConfigError, match="storage"):
        greedy_k_center(x, 2, storage="bfloat16")
    with pytest.raises(ConfigError, match="device"):
        greedy_k_center(x, 2, device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA device"):
            greedy_k_center(x, 2, device="cuda")


def test_features_it_cannot_measure() -> None:
    x = clustered(6, 4)
    x[4, 2] = np.nan
    with pytest.raises(FeatureError, match="doc 4 are not finite"):
        greedy_k_center(x, 2)
    big = clustered(6, 4) * 1e5
    with pytest.raises(FeatureError, match="beyond float16"):
        greedy_k_center(big, 2)
    assert len(greedy_k_center(big, 2, storage="float32")) == 2
    with pytest.raises(FeatureError, match="2-D"):
        greedy_k_center(np.zeros(5), 2)


def test_progress_callback_sees_every_pick_and_can_stop_the_run() -> None:
    x = clustered(300, 16)
    seen: list[int] = []
    _core.greedy_k_center(x, 12, 0, on_pick=seen.append)
    assert seen == list(range(1, 13))

    def stop(done: int) -> None:
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _core.greedy_k_center(x, 12, 0, on_pick=stop)


def test_first_center_is_drawn_from_the_seed() -> None:
    x = clustered(50, 4)
    assert greedy_k_center(x, 3, seed=11)[0] == np.random.default_rng(11).integers(50)
    assert greedy_k_center(x, 3, seed=11).tolist() == greedy_k_center(x, 3, seed=11).tolist()


def test_float16_conversion_rounds_like_numpy() -> None:
    rng = np.random.default_rng(0)
    halves = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    halves = np.sort(halves[np.isfinite(halves)].astype(np.float64))
    halfway = (halves[:-1] + halves[1:]) / 2  # exact in float32: round-to-even decides
    edges = [65504, 65519.996, 65520, 1e6, 2.0**-25, 2.0**-24, 3 * 2.0**-26, 1e-30, -0.0, np.inf, -np.inf]
    x = np.concatenate([rng.standard_normal(5000) * 10.0 ** rng.integers(-9, 6, 5000), halves, halfway, edges])
    x = x.astype(np.float32)
    with np.errstate(over="ignore"):
        expected = x.astype(np.float16).view(np.uint16)
    for simd in (True, False):
        np.testing.assert_array_equal(_core.to_float16(x, simd=simd).view(np.uint16), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_triton_step_lowers_the_minimum_and_picks_the_farthest_row(tk: ModuleType, dtype: torch.dtype) -> None:
    x = torch.from_numpy(clustered(75, 150)).to(dtype)  # several row blocks; d not a multiple of BLOCK_D
    state = tk.KCenterState(x, 3, first=4)
    before = state.min_d2.clone()
    state.step(0)
    lowered, nxt = tk.kcenter_step_reference(x, before, 4)
    lowered[nxt] = -1.0
    assert state.centers[1].item() == nxt
    torch.testing.assert_close(state.min_d2, lowered, rtol=1e-5, atol=1e-3)


def test_triton_k_center_matches_the_cpu_paths(tk: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tk, "BLOCK_N", 8)
    monkeypatch.setattr(tk, "PICK_BLOCK", 4)  # 13 blocks: the pick kernel loops over them
    x = clustered(100, 20)
    np.testing.assert_array_equal(triton(tk, x, 25, 9, torch.float32), greedy_k_center_reference(x, 25, seed=9))
    np.testing.assert_array_equal(triton(tk, x, 25, 9, torch.float16), native(x, 25, 9, float16=True, simd=True))


# Compiles both kernels to a cubin for sm_90 (H100/H200) with the ptxas inside the Triton wheel: no GPU
# needed. Pointer and size arguments carry the 16-divisibility hints a real launch gives them.
HOPPER_COMPILE = """
import re
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import fastmmeval.triton_kernels.kcenter as K

def cubin(fn, signature, constexprs, aligned):
    attrs = {(list(signature).index(name),): [["tt.divisibility", 16]] for name in aligned}
    kernel = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs),
                            target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    assert kernel.asm["cubin"], fn.__name__
    return kernel.asm["ptx"]

for rows in ("*fp16", "*fp32"):
    sig = {"x_ptr": rows, "min_ptr": "*fp32", "centers_ptr": "*i64", "block_max_ptr": "*fp32",
           "block_arg_ptr": "*i64", "step": "i32", "n": "i32", "d": "i32", "stride": "i32",
           "BLOCK_N": "constexpr", "BLOCK_D": "constexpr"}
    ptx = cubin(K._step_kernel, sig, {"BLOCK_N": K.BLOCK_N, "BLOCK_D": K.BLOCK_D},
                ["x_ptr", "min_ptr", "centers_ptr", "block_max_ptr", "block_arg_ptr", "d", "stride"])
    print(rows, "16-byte row loads:", len(re.findall(r"ld\\.global\\S*\\.v4", ptx)))
sig = {"block_max_ptr": "*fp32", "block_arg_ptr": "*i64", "min_ptr": "*fp32", "centers_ptr": "*i64",
       "step": "i32", "n_blocks": "i32", "BLOCK": "constexpr"}
cubin(K._pick_kernel, sig, {"BLOCK": K.PICK_BLOCK}, [])
print("compiled")
"""


def test_kernels_compile_for_a_hopper_gpu(tmp_path) -> None:
    pytest.importorskip("triton")
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env.update(TRITON_CACHE_DIR=str(tmp_path), TRITON_DEFAULT_FP_FUSION="1")
    done = subprocess.run([sys.executable, "-c", HOPPER_COMPILE], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.endswith("compiled\n")
    assert "16-byte row loads: 0" not in done.stdout, done.stdout


def test_covering_radius_is_the_farthest_distance_to_a_nearest_center() -> None:
    x = np.array([[0.0, 0.0], [3.0, 4.0], [6.0, 8.0], [0.0, 1.0]])
    assert covering_radius(x, np.array([0])) == 10.0
    assert covering_radius(x, np.array([0, 2])) == 5.0
    with pytest.raises(FeatureError, match="center indices"):
        covering_radius(x, np.array([4]))
