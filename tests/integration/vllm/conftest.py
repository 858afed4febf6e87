"""Real vLLM on the host device through the plugin: environment, tiny models, HF reference."""

from __future__ import annotations

import os

import pytest
from engine_teardown import clean_distributed_state

from support.hf_reference import local_model

# Before vLLM is imported anywhere in this session: our platform on the host, the engine
# in this process (no engine-core subprocess, so a module can share one LLM cheaply).
os.environ["VLLM_ASCEND_DEVICE"] = "cpu"
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="session")
def model_dirs() -> dict[str, str]:
    """One tiny fp32 model per style, made once in models/ (scripts/make_models.py)."""
    styles = ("llama", "qwen3", "deepseek_v3", "deepseek_v2", "qwen3_moe")
    return {style: str(local_model(style, "tiny")) for style in styles}


@pytest.fixture(autouse=True, scope="module")
def _no_vllm_distributed_state_left():  # type: ignore[no-untyped-def]
    """After each module, no process group of vLLM's is left for the next module (or a
    forked child) to inherit, also when an engine failed half-way through its start."""
    yield
    clean_distributed_state()
