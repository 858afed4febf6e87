"""The plan for DeepSeek-V3.2 (sparse MLA, DSA): eager on both devices with the reason
(the taken-over indexer is wrong under Dynamo); the sparse ops' documented limits refused
up front."""

from __future__ import annotations

import pytest

from ascend_core.plan import fields, plan_config
from ascend_core.plan.graph import SPARSE_MLA_EAGER_REASON
from ascend_core.plan.result import CompileMode, GraphMode
from unit.core.plan_fixtures import host, mla_model, npu


@pytest.mark.parametrize("device", [host, npu])
def test_a_dsa_model_runs_eagerly_on_both_devices_with_the_reason(device) -> None:  # type: ignore[no-untyped-def]
    """Traced by Dynamo the taken-over indexer gives wrong ids: no compilation, no graphs."""
    plan = plan_config(device(mla_model(is_moe=False, index_topk=2048)))
    assert plan.graph_mode is GraphMode.NONE
    assert plan.compile_mode is CompileMode.NONE
    for field in (fields.GRAPH_MODE, fields.COMPILE_MODE):
        (change,) = plan.changes_to(field)
        assert change.reason.endswith(SPARSE_MLA_EAGER_REASON)


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
