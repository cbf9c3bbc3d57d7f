"""The installed package layout."""

import importlib.util
from pathlib import Path

import fastmmeval
import fastmmeval.triton_kernels


def test_our_triton_kernels_live_inside_the_package_not_at_top_level() -> None:
    assert Path(fastmmeval.triton_kernels.__file__).parent.name == "triton_kernels"
    bare = importlib.util.find_spec("triton_kernels")
    # A bare `triton_kernels` may exist (triton ships one) but must never be ours. (Run pytest
    # as `pytest`, not `python -m pytest`, which puts the checkout itself on sys.path.)
    assert bare is None or Path(bare.origin or "").resolve() != Path(fastmmeval.triton_kernels.__file__).resolve()


def test_the_native_core_is_built() -> None:
    from fastmmeval import _core

    assert _core.ngram_hashes.__doc__ and "XXH3-64" in _core.ngram_hashes.__doc__


def test_python_dash_m_fastmmeval_runs_the_cli() -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "fastmmeval", "models"], capture_output=True, text=True, check=True)
    assert "socratic" in out.stdout and "hf" in out.stdout
