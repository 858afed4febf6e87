"""The plan for DeepSeek-V3.2 (sparse MLA, DSA): full graphs refused on the NPU with the
backend's reason, PIECEWISE kept; the sparse ops' documented limits refused up front."""

from __future__ import annotations

import pytest

from ascend_core.plan import fields, plan_config
from ascend_core.plan.graph import NPU_SPARSE_MLA_FULL_GRAPHS_REASON
from ascend_core.plan.result import GraphMode
from unit.core.plan_fixtures import host, mla_model, npu


def test_npu_full_graphs_of_a_dsa_model_become_piecewise_with_the_reason() -> None:
    plan = plan_config(npu(mla_model(is_moe=False, index_topk=2048)))
    assert plan.graph_mode is GraphMode.PIECEWISE
    (change,) = plan.changes_to(fields.GRAPH_MODE)
    assert change.reason.endswith(NPU_SPARSE_MLA_FULL_GRAPHS_REASON)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [({"index_topk": 3000}, "index_topk 3000"), ({"dtype": "float32"}, "dtype float32")],
)
def test_the_sparse_ops_limits_refuse_on_the_npu_only(overrides, named) -> None:  # type: ignore[no-untyped-def]
    model = mla_model(is_moe=False, **{"index_topk": 2048, **overrides})
    errors = [e for e in plan_config(npu(model)).errors if "npu_lightning_indexer" in e.what]
    assert len(errors) == 1 and named in errors[0].what
    assert plan_config(host(model)).ok  # the host's plain torch takes both


def test_kv_bytes_per_token_count_the_indexer_keys() -> None:
    """DSA caches, per layer, the latent and rope key and the indexer's key (its own
    cache, index_head_dim values in the model's dtype), read from the config."""
    from ascend_core.memory_budget.sizes import kv_bytes_per_token
    from ascend_core.model_facts import model_facts_from_config

    config = {
        "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32",
        "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128,
        "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
        "v_head_dim": 128, "index_topk": 2048, "index_head_dim": 128,
    }
    facts = model_facts_from_config(config)
    assert facts.use_sparse and facts.index_head_dim == 128
    kv = kv_bytes_per_token(facts, kv_dtype_bytes=2)
    assert kv.bytes == 61 * (512 + 64 + 128) * 2
    assert "index_head_dim" in kv.formula
    dense = kv_bytes_per_token(model_facts_from_config(
        {k: v for k, v in config.items() if not k.startswith("index_")}), kv_dtype_bytes=2)
    assert dense.bytes == 61 * (512 + 64) * 2
