"""The doctor's weight bytes of int4 layers, per device: what each device holds after load
(ascend_core.memory_budget.int4_held), not the files' widths."""

from __future__ import annotations

import pytest

from ascend_core.memory_budget import Int4Holder, dtype_bytes, weights_size
from ports.model_files import TensorHeader as T

HOST, NPU = Int4Holder.HOST, Int4Holder.NPU
OUT, IN, GROUP = 64, 128, 32
GROUPS = IN // GROUP


def _w4a16(stem: str, zero_points: bool) -> list[T]:
    """llm-compressor's pack-quantized layer: eight int4 values a int32 along the inputs,
    scales [out, groups], zero points packed eight a int32 along the outputs."""
    headers = [
        T(f"{stem}.weight_packed", "I32", (OUT, IN // 8)),
        T(f"{stem}.weight_scale", "BF16", (OUT, GROUPS)),
        T(f"{stem}.weight_shape", "I64", (2,)),
    ]
    if zero_points:
        headers.append(T(f"{stem}.weight_zero_point", "I32", (OUT // 8, GROUPS)))
    return headers


@pytest.mark.parametrize("model_dtype", ["bfloat16", "float32"])
def test_w4a16_linear_held_dequantized_on_the_host_packed_on_the_npu(model_dtype: str) -> None:
    fb = dtype_bytes(model_dtype)
    headers = _w4a16("model.layers.0.self_attn.q_proj", zero_points=True)
    host = weights_size(headers, model_dtype, int4_holder=HOST)
    # The weight in the model dtype, the scales kept at it, zero points dropped, shape kept.
    assert host.total_bytes == OUT * IN * fb + OUT * GROUPS * fb + 16
    npu = weights_size(headers, model_dtype, int4_holder=NPU)
    # int4 packs (the stored int32 words), scales and offsets (one a group and output).
    assert npu.total_bytes == OUT * IN // 2 + 2 * OUT * GROUPS * fb + 16
    assert host.quantized and npu.quantized
    assert "W4A16 linears dequantized at load" in host.detail
    assert "as the NPU holds them: W4A16 linears as int4 packs" in npu.detail
    # Without a device: the files' widths, scales at float32 (the int8 layers' rule).
    files = weights_size(headers, model_dtype)
    assert files.total_bytes == OUT * IN // 2 + OUT * GROUPS * 4 + 16 + OUT * GROUPS // 2


@pytest.mark.parametrize("zero_points", [False, True])
def test_w4a16_experts_drop_scales_on_the_host_and_shapes_on_the_npu(zero_points: bool) -> None:
    headers = [h for e in range(2) for p in ("gate_proj", "up_proj", "down_proj")
               for h in _w4a16(f"model.layers.0.mlp.experts.{e}.{p}", zero_points)]
    host = weights_size(headers, "bfloat16", int4_holder=HOST)
    assert host.total_bytes == host.routed_expert_bytes == 6 * OUT * IN * 2
    npu = weights_size(headers, "bfloat16", int4_holder=NPU)
    per = OUT * IN // 2 + OUT * GROUPS * 2 * (2 if zero_points else 1)
    assert npu.total_bytes == npu.routed_expert_bytes == 6 * per
    assert "W4A16 experts dequantized at load to bfloat16" in host.detail


def _w4a8(stem: str, row: bool) -> list[T]:
    """ModelSlim W4A8_DYNAMIC: int4 pairs in int8 [out / 2, in], float32 scale and offset
    [out, 1], scale_bias [out, 1] (column-parallel) or [out, 16] (row-parallel)."""
    return [
        T(f"{stem}.weight", "I8", (OUT // 2, IN)),
        T(f"{stem}.weight_scale", "F32", (OUT, 1)),
        T(f"{stem}.weight_offset", "F32", (OUT, 1)),
        T(f"{stem}.scale_bias", "F32", (OUT, 16 if row else 1)),
    ]


@pytest.mark.parametrize("row", [False, True])
@pytest.mark.parametrize("model_dtype", ["bfloat16", "float16"])
def test_w4a8_linear_int4_one_per_byte_on_the_host_int64_scales_on_the_npu(
    row: bool, model_dtype: str
) -> None:
    headers = _w4a8("model.layers.0.mlp.down_proj", row)
    host = weights_size(headers, model_dtype, int4_holder=HOST)
    # int8 [out, in]; scale and offset float32; scale_bias summed to one float32 column.
    assert host.total_bytes == OUT * IN + 3 * OUT * 4
    npu = weights_size(headers, model_dtype, int4_holder=NPU)
    # int4 packs; the scale as int64 bits; offset and scale_bias float32 [out].
    assert npu.total_bytes == OUT * IN // 2 + OUT * 8 + 2 * OUT * 4
    assert "one per int8 (2x the packed bytes)" in host.detail
    assert "scales as int64 bit patterns" in npu.detail


def test_w4a8_experts_keep_scale_bias_and_add_down_projs_sum() -> None:
    prefix = "model.layers.0.mlp.experts.0"
    headers = [*_w4a8(f"{prefix}.gate_proj", row=False), *_w4a8(f"{prefix}.down_proj", row=True)]
    host = weights_size(headers, "bfloat16", int4_holder=HOST)
    bias = OUT * 4 + (OUT * 16 * 4 + OUT * 4)  # gate's column; down's 16 plus its sum
    assert host.total_bytes == 2 * (OUT * IN + 2 * OUT * 4) + bias
    npu = weights_size(headers, "bfloat16", int4_holder=NPU)
    # float32 scale parameters stay beside the int64 operand.
    assert npu.total_bytes == 2 * (OUT * IN // 2 + OUT * (4 + 8) + OUT * 4) + bias
    assert host.routed_expert_bytes == host.total_bytes
    assert "down_proj's per-rank sum" in npu.detail


def test_other_layers_count_as_before_with_a_device() -> None:
    headers = [
        T("model.embed_tokens.weight", "BF16", (32, 16)),
        T("model.layers.0.mlp.up_proj.weight", "I8", (16, 16)),  # W8A8_DYNAMIC
        T("model.layers.0.mlp.up_proj.weight_scale", "BF16", (16, 1)),
    ]
    plain = weights_size(headers, "bfloat16")
    for holder in Int4Holder:
        held = weights_size(headers, "bfloat16", int4_holder=holder)
        assert (held.total_bytes, held.detail) == (plain.total_bytes, plain.detail)
