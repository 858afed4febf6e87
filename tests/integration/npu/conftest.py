"""The tiny models the emulated-NPU runs use, made locally (scripts/make_models.py)."""

from __future__ import annotations

import pytest

from support.hf_reference import local_model

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="session")
def npu_model_dirs() -> dict[str, str]:
    return {style: str(local_model(style, "tiny")) for style in ("llama", "qwen3", "qwen3_moe")}
