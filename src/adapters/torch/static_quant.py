"""Static (per-tensor) activation quantization parameters, as the NPU op takes them.

`npu_quantize` (div_mode False) computes x * scales + zero_points with the scales and
zero points in the input's dtype, and vllm-ascend holds them so: the checkpoint's
input_scale and input_offset in the params dtype, the reciprocal taken there
(1 / input_scale, rounded to the params dtype). Both devices quantize with these values
(the host widening them to float32, as the op does), so in bf16 or fp16 the host's int8
activations are the NPU's, not those of a float32 reciprocal; a float32 model keeps
float32 values.
"""

from __future__ import annotations

import torch


def static_activation_params(
    input_scale: torch.Tensor, input_offset: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """(inv_scale, offset), [1] each in `dtype`: 1 / input_scale computed in `dtype` from the
    scale rounded to `dtype`, and the integer-valued offset in `dtype` (exact: |offset| <=
    128 fits every float dtype)."""
    scale = input_scale.reshape(-1)[:1].to(dtype)
    return (1.0 / scale).contiguous(), input_offset.reshape(-1)[:1].to(dtype).contiguous()
