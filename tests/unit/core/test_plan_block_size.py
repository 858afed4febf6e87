"""Plan step: KV cache block size and its documented exceptions."""

from __future__ import annotations

import pytest

from ascend_core.errors import ConfigError
from ascend_core.plan import fields, plan_config
from ports.device import ChipFamily
from unit.core.plan_fixtures import dense_model, dsa_model, host, mla_model, npu, step_errors


@pytest.mark.parametrize("model", [dense_model(), mla_model(), dsa_model()])
@pytest.mark.parametrize("chip", [ChipFamily.A2, ChipFamily.A3, ChipFamily.P310])
def test_npu_default_is_128_with_a_reason(model: object, chip: ChipFamily) -> None:
    plan = plan_config(npu(model, chip=chip))  # type: ignore[arg-type]
    assert plan.block_size == 128
    (change,) = plan.changes_to(fields.BLOCK_SIZE)
    assert (change.old, change.new) == (None, 128)
    assert "128-token" in change.reason


def test_host_uses_128_too_and_says_why() -> None:
    plan = plan_config(host())
    assert plan.block_size == 128
    (change,) = plan.changes_to(fields.BLOCK_SIZE)
    assert "reference" in change.reason


@pytest.mark.parametrize("size", [16, 128])
def test_a_users_multiple_of_16_is_kept(size: int) -> None:
    # MLA: the MHA/GQA attention op's tighter prefill limits do not apply to its calls,
    # whose decode takes 16 or 128 (the others: tests/unit/core/test_op_limits.py).
    plan = plan_config(npu(mla_model(), cache={"block_size": size}))
    assert not step_errors(plan)
    assert plan.block_size == size
    assert not plan.changes_to(fields.BLOCK_SIZE)


@pytest.mark.parametrize("size", [8, 24, 100])
def test_a_users_non_multiple_of_16_on_npu_is_an_error_with_a_hint(size: int) -> None:
    (error,) = plan_config(npu(cache={"block_size": size})).errors
    assert isinstance(error, ConfigError)
    assert f"cache_config.block_size={size}" in error.what
    assert "--block-size 128" in error.hint


def test_the_host_accepts_any_block_size() -> None:
    plan = plan_config(host(cache={"block_size": 24}))
    assert plan.ok
    assert plan.block_size == 24


def test_compressed_attention_takes_only_its_kernel_sizes() -> None:
    model = mla_model(architecture="DeepseekV4ForCausalLM", compressed_attention=True)
    assert not step_errors(plan_config(npu(model, cache={"block_size": 64})))
    (error,) = step_errors(plan_config(npu(model, cache={"block_size": 256})))
    assert "cache_config.block_size=256" in error.what
    assert "DeepseekV4ForCausalLM" in error.what
    assert "[32, 64, 128]" in error.what
    assert "--block-size 128" in error.hint


@pytest.mark.parametrize("where", [npu, host])
def test_hybrid_models_give_vllm_128_to_round_up_from_and_say_so(where) -> None:  # type: ignore[no-untyped-def]
    plan = plan_config(where(dense_model(hybrid=True)))
    assert plan.block_size == 128
    (change,) = plan.changes_to(fields.BLOCK_SIZE)
    assert "multiple" in change.reason and "hybrid" in change.reason


def test_a_users_other_size_with_prefix_caching_is_kept_with_the_references_128_said() -> None:
    """vllm_ascend/utils.py refresh_block_size sets 128 over a user's size when prefix
    caching (or chunked prefill) is on, except for hybrid and DeepSeek-V4 models; here the
    size stays (the NPU's kernels accept it) and a warning says what vllm-ascend does
    (docs/differences-from-vllm-ascend.md)."""
    plan = plan_config(npu(mla_model(), cache={"block_size": 64}))
    assert plan.block_size == 64
    (note,) = [w for w in plan.warnings if "block_size=64" in w]
    assert "vllm-ascend sets 128" in note and "prefix caching" in note
    quiet = (
        npu(mla_model(), cache={"block_size": 64, "enable_prefix_caching": False}),
        npu(mla_model(), cache={"block_size": 128}),
        host(cache={"block_size": 64}),
    )
    for deployment in quiet:
        assert not [w for w in plan_config(deployment).warnings if "block_size=" in w]
