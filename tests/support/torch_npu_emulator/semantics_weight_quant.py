"""What the emulated torch_npu weight-only quantized matmul computes, written from the
2.14.0 wheel's op doc of npu_weight_quant_batchmatmul (Atlas A2/A3 rows).

Independent of adapters.cpu.weight_quant. Documented limits raise ValueError (as the
hardware refuses them); what the docs allow but this emulator does not model (int4 in
int32, per-group, int64/int32 scale and offset, quant_scale output, FRACTAL_NZ) raises
NotImplementedError.

Precision: the docs state dtypes, not intermediate precision. Modelled as the high
precision mode (inner_precise 0): the weight dequantized in float32,
(weight + antiquant_offset) * antiquant_scale, rounded to x's dtype, the product summed in
float32 with the bias, rounded once to x's dtype.
"""

from __future__ import annotations

from typing import Any

import torch

from support.torch_npu_emulator.semantics import F32, HALF_TYPES, _require

_MAX_KN = 65535


def _per_channel(t: torch.Tensor, n: int) -> bool:
    return tuple(t.shape) in ((n,), (1, n))


def npu_weight_quant_batchmatmul(a: dict[str, Any]) -> torch.Tensor:
    x, weight, scale, offset, bias = (a["x"], a["weight"], a["antiquant_scale"],
                                      a["antiquant_offset"], a["bias"])
    if a["quant_scale"] is not None or a["quant_offset"] is not None:
        raise NotImplementedError("npu_weight_quant_batchmatmul: quant_scale (int8 output)")
    if a["antiquant_group_size"] or a.get("weight_dtype") is not None:
        raise NotImplementedError("npu_weight_quant_batchmatmul: per-group / int4 weights")
    if weight.dtype == torch.int32:
        raise NotImplementedError("npu_weight_quant_batchmatmul: int4 weights in int32")
    if scale.dtype == torch.int64:
        raise NotImplementedError("npu_weight_quant_batchmatmul: int64 antiquant_scale")
    _require(x.dtype in HALF_TYPES,
             f"npu_weight_quant_batchmatmul: x dtype {x.dtype} (float16/bfloat16 only)")
    _require(weight.dtype == torch.int8,
             f"npu_weight_quant_batchmatmul: weight dtype {weight.dtype} (int8)")
    _require(x.dim() == 2 and weight.dim() == 2,
             "npu_weight_quant_batchmatmul: x (M, K) and weight (K, N), two dimensions")
    m, k = x.shape
    _require(weight.shape[0] == k,
             f"npu_weight_quant_batchmatmul: weight must be (K={k}, N), not {tuple(weight.shape)}")
    n = weight.shape[1]
    _require(m >= 1 and 1 <= k <= _MAX_KN and 1 <= n <= _MAX_KN,
             f"npu_weight_quant_batchmatmul: M >= 1, K and N in [1, 65535] (M={m} K={k} N={n})")
    _require(scale.dtype == x.dtype,
             f"npu_weight_quant_batchmatmul: antiquant_scale {scale.dtype} must be x's {x.dtype}")
    _require(_per_channel(scale, n) or tuple(scale.shape) in ((1,), (1, 1)),
             f"npu_weight_quant_batchmatmul: antiquant_scale {tuple(scale.shape)}: (N,) or "
             "(1, N) per channel, (1,) per tensor")
    if offset is not None:
        _require(offset.dtype == scale.dtype,
                 f"npu_weight_quant_batchmatmul: antiquant_offset {offset.dtype} must be "
                 f"antiquant_scale's {scale.dtype}")
        _require(offset.shape == scale.shape,
                 "npu_weight_quant_batchmatmul: antiquant_offset's shape must be the scale's")
    if bias is not None:
        wanted = F32 if x.dtype == torch.bfloat16 else torch.float16
        _require(bias.dtype == wanted,
                 f"npu_weight_quant_batchmatmul: bias {bias.dtype} with x {x.dtype} "
                 f"(must be {wanted})")
        _require(_per_channel(bias, n) or tuple(bias.shape) == (1,),
                 "npu_weight_quant_batchmatmul: bias (N,), (1, N) or (1,)")
    w = weight.to(F32)
    if offset is not None:
        w = w + offset.to(F32).reshape(1, -1)
    deq = (w * scale.to(F32).reshape(1, -1)).to(x.dtype).to(F32)
    y = x.to(F32) @ deq
    if bias is not None:
        y = y + bias.to(F32).reshape(1, -1)
    return y.to(x.dtype)


IMPLEMENTED = {"npu_weight_quant_batchmatmul": npu_weight_quant_batchmatmul}
