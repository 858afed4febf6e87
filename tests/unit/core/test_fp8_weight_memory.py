"""fp8 weights in the memory budget: held as the fp8 path holds them.

Every chip and the host dequantize fp8 weights at load (ascend_core.quantization.fp8):
the layer holds the weight in the model dtype and drops its scales, so the budget counts
that, not the file's bytes. tests/integration/npu/test_fp8_w4a8_on_emulated_npu.py
compares the doctor's figure with what the loaded model holds.
"""

from __future__ import annotations

import pytest

from ascend_core.memory_budget import dtype_bytes, weights_size
from ascend_core.quantization import QuantMethod
from ascend_core.quantization.fp8 import Fp8Path, fp8_serving
from ascend_core.roofline.weights import weight_format
from ports.device import ChipFamily, DeviceKind
from ports.model_files import TensorHeader

HEADERS = (
    TensorHeader("model.embed_tokens.weight", "BF16", (1000, 64)),
    TensorHeader("model.layers.0.self_attn.q_proj.weight", "F8_E4M3", (128, 64)),
    TensorHeader("model.layers.0.self_attn.q_proj.weight_scale", "F32", (128, 1)),  # channel
    TensorHeader("model.layers.0.mlp.down_proj.weight", "F8_E4M3", (64, 256)),
    TensorHeader("model.layers.0.mlp.down_proj.weight_scale_inv", "F32", (1, 2)),  # blocks
    TensorHeader("model.layers.0.mlp.experts.0.up_proj.weight", "F8_E4M3", (32, 64)),
    TensorHeader("model.layers.0.mlp.experts.0.up_proj.weight_scale", "F32", (1, 1)),
)


@pytest.mark.parametrize("model_dtype", ["bfloat16", "float16", "float32"])
def test_dequantized_fp8_weights_count_at_the_model_dtype_without_their_scales(
    model_dtype: str,
) -> None:
    size = weights_size(HEADERS, model_dtype, fp8_dequantized=True)
    width = dtype_bytes(model_dtype)
    fp8 = 128 * 64 + 64 * 256 + 32 * 64
    assert size.total_bytes == (1000 * 64 + fp8) * width
    assert size.routed_expert_bytes == 32 * 64 * width
    assert size.quantized and "3 fp8 matrices held at" in size.detail


def test_stored_fp8_weights_count_one_byte_and_their_scales() -> None:
    size = weights_size(HEADERS, "bfloat16")  # a path that would keep them fp8
    fp8 = 128 * 64 + 64 * 256 + 32 * 64
    # weight_scale at float32 (a quantization parameter), weight_scale_inv at the dtype.
    assert size.total_bytes == 1000 * 64 * 2 + fp8 + (128 + 1) * 4 + 2 * 2


def test_every_chip_and_the_host_dequantize_fp8_at_load() -> None:
    # The doctor passes fp8_dequantized from this decision; a chip with a native fp8 path
    # would count the stored bytes.
    for chip in ChipFamily:
        for kind in DeviceKind:
            assert fp8_serving(chip, kind).path is Fp8Path.DEQUANTIZE_AT_LOAD


def test_the_roofline_reads_fp8_weights_at_the_model_dtype() -> None:
    fmt = weight_format(QuantMethod.FP8, None, 2)
    assert fmt.bytes_per_weight == 2 and "dequantized at load" in fmt.label
