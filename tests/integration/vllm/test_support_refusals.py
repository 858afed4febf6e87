"""Models this build does not serve are refused by the support matrix inside vLLM's own
config building, before any weight loads: a typed error naming feature, device and what
would serve it, never a crash deep inside vLLM. MoE and MLA models, once refused here
(Qwen3-MoE used to end in `'UnquantizedFusedMoEMethod' object has no attribute
'is_monolithic'`), are served on the host now, and so is DeepSeek-V3.2's sparse MLA (issue 35).
DeepSeek-V4's compressed MLA is served on the host by the plugin's own class (issue 46)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters.vllm.engine.startup_errors import StartupError
from ascend_core.errors import PlanErrors, UnsupportedFeatureError

COMMON = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 512,
    "max_position_embeddings": 512,
    "torch_dtype": "float32",
    "rms_norm_eps": 1e-6,
}
CONFIGS = {
    "qwen3-moe": {
        **COMMON,
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "head_dim": 16,
        "moe_intermediate_size": 32,
        "num_experts": 4,
        "num_experts_per_tok": 2,
    },
    "deepseek-v2-lite": {
        **COMMON,
        "architectures": ["DeepseekV2ForCausalLM"],
        "model_type": "deepseek_v2",
        "kv_lora_rank": 32,
        "q_lora_rank": None,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8,
        "v_head_dim": 16,
        "moe_intermediate_size": 32,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": 1,
    },
}
CONFIGS["deepseek-v3.2"] = {
    **CONFIGS["deepseek-v2-lite"],
    "architectures": ["DeepseekV32ForCausalLM"],
    "model_type": "deepseek_v32",
    "q_lora_rank": 32,
    "index_topk": 64,
    "index_head_dim": 16,
    "index_n_heads": 2,
}
# The shape scripts/make_models.py gives its tiny DeepSeek-V4 (make_dsv4_model), read by
# transformers' DeepseekV4Config: one layer of each attention kind, hash-routed first MoE.
CONFIGS["deepseek-v4"] = {
    **COMMON,
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "num_hidden_layers": 3,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "q_lora_rank": 32,
    "partial_rotary_factor": 0.25,
    "layer_types": [
        "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"
    ],
    "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
    "mlp_layer_types": ["hash_moe", "moe", "moe"],
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "sliding_window": 16,
    "o_groups": 2,
    "o_lora_rank": 16,
    "index_n_heads": 2,
    "index_head_dim": 16,
    "index_topk": 4,
    "hc_mult": 4,
    "num_nextn_predict_layers": 0,
}
EXPECTED: dict[str, list[str]] = {
    "qwen3-moe": [],
    "deepseek-v2-lite": [],
    "deepseek-v3.2": [],
    "deepseek-v4": [],
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_an_unsupported_model_is_refused_while_vllm_builds_its_config(
    tmp_path: Path, name: str
) -> None:
    from vllm.engine.arg_utils import EngineArgs

    (tmp_path / "config.json").write_text(json.dumps(CONFIGS[name]))  # no weights at all
    args = EngineArgs(model=str(tmp_path), enforce_eager=True)
    if not EXPECTED[name]:
        args.create_engine_config()  # served: the plan accepts it
        return
    with pytest.raises(StartupError) as caught:  # the message alone at `vllm serve`
        args.create_engine_config()
    assert isinstance(caught.value.error, PlanErrors)
    errors = caught.value.error.errors
    assert all(isinstance(e, UnsupportedFeatureError) for e in errors), errors
    assert [e.feature for e in errors] == EXPECTED[name]
    assert {e.device for e in errors} == {"cpu"}
    assert all("the host device" in e.what and e.hint for e in errors)

