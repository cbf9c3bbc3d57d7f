"""Shared fixtures. Hub access is switched off before anything imports transformers."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from fastmmeval.testing.random_init import write_tiny_chat_lm

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
# Triton kernels run on CPU tensors through its interpreter; read when a kernel module is imported.
os.environ["TRITON_INTERPRET"] = "1"

# Fuzz tests: 200 generated cases per loader in CI (`ci`, the default); `--hypothesis-profile long`
# for a deeper search. No deadline: a 2-core CI box stalls now and then, which is not a failure.
_FUZZ = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]}
settings.register_profile("ci", max_examples=200, derandomize=True, **_FUZZ)
settings.register_profile("long", max_examples=5000, **_FUZZ)
settings.load_profile("ci")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `gpu` are skipped where torch sees no CUDA device."""
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu:
        return
    import torch

    if not torch.cuda.is_available():
        for item in gpu:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Built datasets go to a per-session folder, not the user's cache."""
    os.environ["FASTMMEVAL_CACHE"] = str(tmp_path_factory.mktemp("cache"))

@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """One intra-op thread for a module's tests: with tiny models, two threads on a busy 2-core box stall."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a tiny random-weight Llama chat model and a real trained BPE tokenizer.

    Weights are drawn at a large scale so that greedy choices are far from ties."""
    folder = tmp_path_factory.mktemp("tiny_lm")
    write_tiny_chat_lm(folder, seed=0)
    return folder
