"""The int4 weight-only ops (W4A16), written from the op docs in the 2.14.0 wheel:
npu_convert_weight_to_int4pack, npu_weight_quant_batchmatmul with int4 weights, and
npu_grouped_matmul's antiquant case (antiquant_groups, called by semantics_moe).

npu_convert_weight_to_int4pack: int32 [k, n] (or [n, k]) ND, contiguous, last dim a
multiple of 8, values in [-8, 7] -> int32 [k, n / 8], eight int4 per int32. The docs call
the packing interleaved without giving the order; only this emulator's
npu_weight_quant_batchmatmul reads it, so it is modelled as eight consecutive columns per
int32, the first in the low bits (the real layout is opaque to the plugin).

npu_weight_quant_batchmatmul (int32/int4 weights only here; int8 weights are another
function's, W8A16): y = x @ ((weight + antiquant_offset) * antiquant_scale) + bias.
Modelled refusals, from the docs (A2/A3): x float16/bfloat16 2-D [M, K], not empty; weight
2-D [K, N / 8] (ND, not transposed); K, N in [1, 65535]; antiquant_scale in x's dtype
(the int64 scale is an int8-weight path), [N] / [1, N] per channel (group size 0) or
[ceil(K / G), N] per group with G a multiple of 32 in [32, K - 1]; antiquant_offset of
the scale's shape and dtype; bias float32 for bfloat16 x, float16 for float16 x, [N] or
[1, N]. quant_scale/quant_offset (int8 output), inner_precise 1 and weight_dtype are not
modelled (NotImplementedError). Arithmetic, which the docs do not state: the weight
antiquantized in float32 and rounded to x's dtype ("high precision" mode), the product
accumulated in float32, the bias added in float32, the result rounded to x's dtype.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from support.torch_npu_emulator.semantics_weight_quant import (
    npu_weight_quant_batchmatmul as int8_weight_quant_batchmatmul,
)

F32 = torch.float32
HALF_TYPES = (torch.float16, torch.bfloat16)
_PACK = 8
_MAX_DIM = 65535
_GROUP_ALIGN = 32


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(message)


def npu_convert_weight_to_int4pack(a: dict[str, Any]) -> torch.Tensor:
    w = a["weight"]
    name = "npu_convert_weight_to_int4pack"
    _require(w.dtype == torch.int32, f"{name}: weight must be int32, not {w.dtype}")
    _require(w.dim() == 2, f"{name}: weight must be 2-D")
    _require(w.is_contiguous(), f"{name}: a non-contiguous weight is not supported")
    _require(w.shape[-1] % _PACK == 0, f"{name}: the last dim must be a multiple of 8")
    _require(bool(((w >= -8) & (w <= 7)).all()), f"{name}: values must be in [-8, 7]")
    if a["inner_k_tiles"] != 0:
        raise NotImplementedError(f"{name}: inner_k_tiles is reserved (0 only)")
    rows, cols = w.shape
    nibbles = (w & 0xF).reshape(rows, cols // _PACK, _PACK)
    shifts = torch.arange(_PACK, dtype=torch.int32, device=w.device) * 4
    return (nibbles << shifts).sum(dim=-1, dtype=torch.int32)


def unpack_int4pack(packed: torch.Tensor) -> torch.Tensor:
    """The signed int4 values [k, n] of an npu_convert_weight_to_int4pack result."""
    rows, words = packed.shape
    shifts = torch.arange(_PACK, dtype=torch.int32, device=packed.device) * 4
    fields = (packed.unsqueeze(-1) >> shifts) & 0xF
    return torch.where(fields > 7, fields - 16, fields).reshape(rows, words * _PACK)


def _int4_weight_quant_batchmatmul(a: dict[str, Any]) -> torch.Tensor:
    name = "npu_weight_quant_batchmatmul"
    x, w = a["x"], a["weight"]
    scale, offset, bias = a["antiquant_scale"], a["antiquant_offset"], a["bias"]
    group = int(a["antiquant_group_size"])
    for unmodelled in ("quant_scale", "quant_offset", "weight_dtype"):
        if a[unmodelled] is not None:
            raise NotImplementedError(f"{name}: {unmodelled} is not modelled")
    if a["inner_precise"] != 0:
        raise NotImplementedError(f"{name}: inner_precise 1 (high performance) is not modelled")
    _require(x.dtype in HALF_TYPES, f"{name}: x must be float16/bfloat16, not {x.dtype}")
    _require(x.dim() == 2 and w.dim() == 2, f"{name}: x and weight must be 2-D")
    _require(x.numel() > 0, f"{name}: empty tensors are not supported")
    k, n = w.shape[0], w.shape[1] * _PACK
    _require(x.shape[1] == k, f"{name}: x [M, {x.shape[1]}] and weight [{k}, N] differ in K")
    _require(1 <= k <= _MAX_DIM and 1 <= n <= _MAX_DIM, f"{name}: K, N must be in [1, 65535]")
    _require(scale.dtype == x.dtype, f"{name}: antiquant_scale must have x's dtype "
             f"({x.dtype}), not {scale.dtype}")
    if group == 0:
        _require(tuple(scale.shape) in ((n,), (1, n), (1,), (1, 1)),
                 f"{name}: per-channel antiquant_scale must be (N,) or (1, N)")
    else:
        _require(group % _GROUP_ALIGN == 0 and _GROUP_ALIGN <= group <= k - 1,
                 f"{name}: antiquant_group_size must be a multiple of 32 in [32, K - 1], "
                 f"not {group} (K = {k})")
        _require(tuple(scale.shape) == (math.ceil(k / group), n),
                 f"{name}: per-group antiquant_scale must be (ceil(K / G), N)")
    if offset is not None:
        _require(offset.shape == scale.shape and offset.dtype == scale.dtype,
                 f"{name}: antiquant_offset must have antiquant_scale's shape and dtype")
    if bias is not None:
        want = F32 if x.dtype == torch.bfloat16 else torch.float16
        _require(bias.dtype == want, f"{name}: bias must be {want} for {x.dtype} x")
        _require(tuple(bias.shape) in ((n,), (1, n)), f"{name}: bias must be (N,) or (1, N)")
    values = unpack_int4pack(w).to(F32)

    def per_row(t: torch.Tensor) -> torch.Tensor:  # [groups or 1, N] -> [K, N]
        t = t.to(F32).reshape(-1, n)
        return t.expand(k, n) if t.shape[0] == 1 else t.repeat_interleave(group, dim=0)[:k]

    if offset is not None:
        values = values + per_row(offset)
    weight = (values * per_row(scale)).to(x.dtype)
    y = x.to(F32) @ weight.to(F32)
    if bias is not None:
        y = y + bias.to(F32).reshape(n)
    return y.to(x.dtype)


def antiquant_groups(a: dict[str, Any], x: torch.Tensor, w: torch.Tensor, sizes: list[int]
                     ) -> torch.Tensor:
    """npu_grouped_matmul's antiquant (weight-only) case with int4 weights (formula 4 of its
    2.14.0 docs): y[rows of g] = x @ ((w[g] + antiquant_offset[g]) * antiquant_scale[g]).
    Modelled refusals (A2/A3, group_list a tensor): x float16/bfloat16; one weight tensor
    [g, k, n] (unpacked by the caller), n even; antiquant_scale in x's dtype, [g, n] per
    channel or [g, G, n] per group with G dividing k; antiquant_offset of the scale's
    shape and dtype (or None); output_dtype None or x's dtype. Arithmetic as
    npu_weight_quant_batchmatmul's here (the docs state none): the weight antiquantized in
    float32 and rounded to x's dtype, the products summed in float32, the result rounded
    once to x's dtype."""
    name = "npu_grouped_matmul (antiquant)"
    scales, offsets = a["antiquant_scale"], a["antiquant_offset"]
    _require(x.dtype in HALF_TYPES, f"{name}: x must be float16/bfloat16, not {x.dtype}")
    _require(a["output_dtype"] in (None, x.dtype),
             f"{name}: output_dtype must be None or x's dtype, not {a['output_dtype']}")
    _require(len(scales) == 1 and (offsets is None or len(offsets) == 1),
             f"{name}: one antiquant_scale (and antiquant_offset) per weight tensor")
    groups, k, n = w.shape
    _require(n % 2 == 0, f"{name}: an int4 weight's last dim must be even, not {n}")
    scale = scales[0]
    _require(scale.dtype == x.dtype, f"{name}: antiquant_scale must have x's dtype "
             f"({x.dtype}), not {scale.dtype}")
    if scale.dim() == 2:
        _require(tuple(scale.shape) == (groups, n),
                 f"{name}: per-channel antiquant_scale must be [g, n] = [{groups}, {n}], "
                 f"not {list(scale.shape)}")
        per_k = scale.unsqueeze(1)
    else:
        _require(scale.dim() == 3 and scale.shape[0] == groups and scale.shape[2] == n
                 and scale.shape[1] > 0 and k % scale.shape[1] == 0,
                 f"{name}: per-group antiquant_scale must be [g, G, n] with G dividing "
                 f"k = {k}, not {list(scale.shape)}")
        per_k = scale.repeat_interleave(k // scale.shape[1], dim=1)
    values = w.to(F32)
    if offsets is not None:
        offset = offsets[0]
        _require(offset.shape == scale.shape and offset.dtype == scale.dtype,
                 f"{name}: antiquant_offset must have antiquant_scale's shape and dtype")
        shaped = offset.unsqueeze(1) if offset.dim() == 2 else offset.repeat_interleave(
            k // offset.shape[1], dim=1)
        values = values + shaped.to(F32)
    weight = (values * per_k.to(F32)).to(x.dtype)
    out = torch.full((x.shape[0], n), float("nan"), dtype=x.dtype, device=x.device)
    start = 0
    for g, size in enumerate(sizes):
        rows = x[start : start + size].to(F32) @ weight[g].to(F32)
        out[start : start + size] = rows.to(x.dtype)
        start += size
    return out


def npu_weight_quant_batchmatmul(a: dict[str, Any]) -> torch.Tensor:
    """int4 weights carried in int32 (W4A16) here; every other weight dtype (int8: W8A16)
    is semantics_weight_quant's."""
    if a["weight"].dtype == torch.int32:
        return _int4_weight_quant_batchmatmul(a)
    return int8_weight_quant_batchmatmul(a)


IMPLEMENTED = {
    "npu_convert_weight_to_int4pack": npu_convert_weight_to_int4pack,
    "npu_weight_quant_batchmatmul": npu_weight_quant_batchmatmul,
}
