"""The NPU attention op's documented limits, refused by the plan before weights load."""

from __future__ import annotations

import pytest

from ascend_core.deployment import MlaShape
from ascend_core.errors import ConfigError
from ascend_core.op_limits import attention_limit_errors, block_size_error
from ascend_core.plan import plan_config
from unit.core.plan_fixtures import dense_model, host, mla_model, npu


def _errors(deployment) -> list[ConfigError]:  # type: ignore[no-untyped-def]
    return [e for e in plan_config(deployment).errors if "npu_fused_infer" in e.what]


@pytest.mark.parametrize("size", [128, 256, 384, 512])
def test_prefill_block_sizes_the_op_takes_pass(size: int) -> None:
    assert plan_config(npu(cache={"block_size": size})).ok


@pytest.mark.parametrize("size", [16, 64, 640])
def test_other_block_sizes_are_refused_naming_the_op(size: int) -> None:
    (error,) = _errors(npu(cache={"block_size": size}))
    assert f"cache_config.block_size={size}" in error.what
    assert "multiple of 128 up to 512" in error.what
    assert "--block-size 128" in error.hint


def test_decode_alone_takes_multiples_of_16() -> None:
    assert block_size_error(16, decode_only=True) is None
    assert block_size_error(24, decode_only=True) is not None
    assert block_size_error(16, decode_only=False) is not None


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dtypes_other_than_fp16_bf16_are_refused(dtype: str) -> None:
    (error,) = _errors(npu(dense_model(dtype=dtype)))
    assert f"model_config.dtype={dtype}" in error.what
    assert "--dtype bfloat16" in error.hint


@pytest.mark.parametrize(("head_size", "refused"), [(128, False), (72, True), (576, True)])
def test_head_size_alignment_and_bound(head_size: int, refused: bool) -> None:
    errors = _errors(npu(dense_model(head_size=head_size)))
    assert bool(errors) is refused
    if refused:
        assert f"head_size {head_size}" in errors[0].what


def test_too_many_heads_per_device_is_refused_until_tp_splits_them() -> None:
    model = dense_model(num_attention_heads=512, num_kv_heads=8, head_size=128)
    (error,) = _errors(npu(model))
    assert "512 query heads" in error.what and "--tensor-parallel-size" in error.hint
    assert not _errors(npu(model, parallel={"tp": 4}))  # 128 heads x 128 per device


@pytest.mark.parametrize(("heads", "kv"), [(12, 5), (128, 1)])
def test_query_heads_must_be_a_bounded_multiple_of_kv_heads(heads: int, kv: int) -> None:
    (error,) = _errors(npu(dense_model(num_attention_heads=heads, num_kv_heads=kv)))
    assert f"{heads} query heads over {kv} KV heads" in error.what


def test_the_host_device_has_no_such_limits() -> None:
    model = dense_model(dtype="float32", head_size=72, num_attention_heads=12, num_kv_heads=5)
    assert attention_limit_errors(host(model, cache={"block_size": 24})) == ()


def test_deepseek_v3_mla_fits_the_npu_calls_at_tp_1_to_4() -> None:
    for tp in (1, 2, 4):  # 128, 64, 32 query heads per device
        assert not _errors(npu(mla_model(), parallel={"tp": tp}))


@pytest.mark.parametrize(
    ("model", "settings", "named"),
    [
        (mla_model(), {"parallel": {"tp": 16}}, "8 query heads per device"),
        (mla_model(dtype="float16"), {}, "dtype float16"),
        (mla_model(), {"cache": {"block_size": 256}}, "block size 256"),
        (mla_model(mla=MlaShape(kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=32,
                                v_head_dim=32)), {}, "kv_lora_rank 32"),
    ],
)
def test_mla_shapes_the_npu_calls_refuse_are_refused_at_plan_time(model, settings, named) -> None:  # type: ignore[no-untyped-def]
    (error,) = _errors(npu(model, **settings))
    assert named in error.what and "VLLM_ASCEND_DEVICE=cpu" in error.hint
    assert not _errors(host(model, **settings))  # the host runs any MLA shape
