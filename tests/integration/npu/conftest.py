"""The tiny models the emulated-NPU runs use, made locally (scripts/make_models.py)."""

from __future__ import annotations

import pytest

from support.hf_reference import MODELS_DIR, local_model, make_model

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="session")
def npu_model_dirs() -> dict[str, str]:
    dirs = {style: str(local_model(style, "tiny")) for style in ("llama", "qwen3", "qwen3_moe")}
    # MLA at the shapes torch_npu's MLA attention documents (scripts/make_models.py).
    mla = make_model(MODELS_DIR / "npu-mla-deepseek_v3", "deepseek_v3", "npu-mla")
    dirs["deepseek_v3_npu_mla"] = str(mla)
    # The same with MoE layers: grouped sigmoid routing through npu_moe_gating_top_k.
    moe = make_model(MODELS_DIR / "npu-mla-moe-deepseek_v3", "deepseek_v3", "npu-mla-moe")
    dirs["deepseek_v3_npu_mla_moe"] = str(moe)
    return dirs
