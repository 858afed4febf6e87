"""The plan for DeepSeek-V3.2 (sparse MLA, DSA): eager on the host with the reason (its one
Inductor graph does not keep the indexer before the attention), and on the NPU
FULL_DECODE_ONLY graphs (the indexer is one opaque op; its builder captures
single-token decode steps), narrowed with the reason where a mode would need more; the
sparse ops' documented limits refused up front."""

from __future__ import annotations

import pytest

from ascend_core.plan import fields, plan_config
from ascend_core.plan.graph import (
    DEFAULT_MLA_REASON,
    SPARSE_MLA_GRAPHS_REASON,
    SPARSE_MLA_HOST_EAGER_REASON,
    SPARSE_MLA_SPECULATIVE_REASON,
)
from ascend_core.plan.result import CompileMode, GraphMode
from unit.core.plan_fixtures import host, mla_model, npu


def _dsa():  # type: ignore[no-untyped-def]
    return mla_model(is_moe=False, index_topk=2048)


def test_a_dsa_model_runs_eagerly_on_the_host_with_the_reason() -> None:
    """Inductor's one graph ran the indexer's op after the attention that reads its top-k."""
    plan = plan_config(host(_dsa()))
    assert (plan.graph_mode, plan.compile_mode) == (GraphMode.NONE, CompileMode.NONE)
    (change,) = plan.changes_to(fields.COMPILE_MODE)
    assert change.reason == SPARSE_MLA_HOST_EAGER_REASON
    # An operator's compile mode on the host goes too, with the same reason.
    asked = plan_config(host(_dsa(), compilation={"mode": CompileMode.DYNAMO_TRACE_ONCE}))
    assert asked.compile_mode is CompileMode.NONE


def test_a_dsa_model_captures_full_decode_graphs_on_the_npu_by_default() -> None:
    plan = plan_config(npu(_dsa()))
    assert plan.graph_mode is GraphMode.FULL_DECODE_ONLY
    assert plan.compile_mode in (None, CompileMode.VLLM_COMPILE)
    (change,) = plan.changes_to(fields.GRAPH_MODE)
    assert (change.old, change.new, change.reason) == (
        None, GraphMode.FULL_DECODE_ONLY, DEFAULT_MLA_REASON
    )


@pytest.mark.parametrize(
    "asked", [GraphMode.PIECEWISE, GraphMode.FULL_AND_PIECEWISE, GraphMode.FULL]
)
def test_a_mode_with_pieces_or_mixed_graphs_narrows_to_full_decode_only(asked) -> None:  # type: ignore[no-untyped-def]
    """A mixed step's per-token rows are rebuilt each step: no piecewise graphs hold the
    indexer op; the decode steps stay captured whole."""
    plan = plan_config(npu(_dsa(), compilation={"graph_mode": asked}))
    assert plan.graph_mode is GraphMode.FULL_DECODE_ONLY
    (change,) = plan.changes_to(fields.GRAPH_MODE)
    assert change.old is asked and change.reason.endswith(SPARSE_MLA_GRAPHS_REASON)


def test_with_speculative_decoding_a_dsa_model_runs_compiled_without_graphs() -> None:
    ngram = {"method": "ngram", "num_speculative_tokens": 2}
    plan = plan_config(npu(_dsa(), speculative=ngram))
    assert plan.graph_mode is GraphMode.NONE
    (change,) = plan.changes_to(fields.GRAPH_MODE)
    assert change.reason.endswith(SPARSE_MLA_SPECULATIVE_REASON)


@pytest.mark.parametrize("device", [host, npu])
def test_enforce_eager_still_runs_a_dsa_model_eagerly(device) -> None:  # type: ignore[no-untyped-def]
    plan = plan_config(device(_dsa(), compilation={"enforce_eager": True}))
    assert (plan.graph_mode, plan.compile_mode) == (GraphMode.NONE, CompileMode.NONE)


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
