"""What each emulated torch_npu op computes, written from the op docs in the 2.14.0 wheel.

Independent of the host adapter (adapters.cpu), so comparing the two tests something.
Each function takes the bound arguments (by schema name) and computes in float32,
returning the input dtype. Documented input rules the NPU adapter relies on are
checked and raise ValueError; features outside what is modelled raise
NotImplementedError, so the emulator never silently computes something the real op
might not.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

F32 = torch.float32
HALF_TYPES = (torch.float16, torch.bfloat16)
FLOAT_TYPES = (torch.float16, torch.bfloat16, torch.float32)
MASK_SIZE = 2048


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(message)


def _rms(x: torch.Tensor, gamma: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    xf = x.to(F32)
    rstd = torch.rsqrt(xf.pow(2).mean(dim=dims, keepdim=True) + eps)
    return (xf * rstd * gamma.to(F32)).to(x.dtype), rstd


def npu_rms_norm(a: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    x, gamma = a["self"], a["gamma"]
    _require(x.dtype in FLOAT_TYPES, f"npu_rms_norm: self dtype {x.dtype} unsupported")
    _require(gamma.dtype == x.dtype, "npu_rms_norm: gamma must have self's dtype")
    _require(2 <= x.dim() <= 8 or x.dim() == 1, "npu_rms_norm: self must be 1-8D")
    _require(tuple(x.shape[-gamma.dim() :]) == tuple(gamma.shape), "npu_rms_norm: gamma shape")
    return _rms(x, gamma, a["epsilon"])


def npu_add_rms_norm(a: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x1, x2, gamma = a["x1"], a["x2"], a["gamma"]
    _require(x1.shape == x2.shape, "npu_add_rms_norm: x1 and x2 shapes differ")
    _require(x1.dtype == x2.dtype == gamma.dtype, "npu_add_rms_norm: dtypes differ")
    summed = (x1.to(F32) + x2.to(F32)).to(x1.dtype)
    y, rstd = _rms(summed, gamma, a["epsilon"])
    return y, rstd, summed


def npu_swiglu(a: dict[str, Any]) -> torch.Tensor:
    x, dim = a["self"], a["dim"]
    _require(x.dtype in FLOAT_TYPES, f"npu_swiglu: dtype {x.dtype} unsupported")
    _require(x.shape[dim] % 2 == 0, "npu_swiglu: the split dim must be even")
    first, second = x.to(F32).chunk(2, dim=dim)
    return (F.silu(first) * second).to(x.dtype)


def npu_rotary_mul(a: dict[str, Any]) -> torch.Tensor:
    x, r1, r2, mode = a["self"], a["r1"], a["r2"], a["rotary_mode"]
    if a["rotate"] is not None:
        raise NotImplementedError("npu_rotary_mul: the rotate matrix is not modelled")
    _require(x.dim() == 4 and r1.dim() == 4 and r2.dim() == 4, "npu_rotary_mul: inputs are 4D")
    _require(x.dtype == r1.dtype == r2.dtype, "npu_rotary_mul: dtypes of input, r1, r2 differ")
    _require(x.dtype in FLOAT_TYPES, f"npu_rotary_mul: dtype {x.dtype} unsupported")
    d = x.shape[-1]
    _require(d % 2 == 0 and d < 896, "npu_rotary_mul: D must be even and < 896")
    _require(r1.shape == r2.shape and r1.shape[-1] == d, "npu_rotary_mul: r1/r2 shape")
    xf = x.to(F32)
    if mode == "half":
        x1, x2 = xf.chunk(2, dim=-1)
        turned = torch.cat((-x2, x1), dim=-1)
    elif mode == "interleave":
        # documented only with r1/r2 broadcast over B and N (11SD, 1S1D, S11D)
        _require(
            sum(1 for s in r1.shape[:3] if s != 1) <= 1,
            "npu_rotary_mul: interleave mode takes r1/r2 as 11SD, 1S1D or S11D",
        )
        x1, x2 = xf[..., ::2], xf[..., 1::2]
        turned = torch.stack((-x2, x1), dim=-1).flatten(-2)
    else:
        raise ValueError(f"npu_rotary_mul: rotary_mode {mode!r} is not half or interleave")
    return (r1.to(F32) * xf + r2.to(F32) * turned).to(x.dtype)


def npu_scatter_nd_update_(a: dict[str, Any]) -> torch.Tensor:
    data, indices, updates = a["self"], a["indices"], a["updates"]
    _require(indices.dtype in (torch.int32, torch.int64), "scatter_nd_update: indices int32/64")
    _require(indices.dim() >= 2, "scatter_nd_update: indices must be at least 2D")
    depth = indices.shape[-1]
    _require(depth <= data.dim(), "scatter_nd_update: indices' last dim exceeds input rank")
    _require(updates.dtype == data.dtype, "scatter_nd_update: updates dtype must be input's")
    expected = tuple(indices.shape[:-1]) + tuple(data.shape[depth:])
    _require(tuple(updates.shape) == expected, f"scatter_nd_update: updates must be {expected}")
    flat = indices.reshape(-1, depth).long()
    for axis in range(depth):
        column = flat[:, axis]
        # out-of-range indices are undefined on the device: refuse them here
        _require(
            bool(((column >= 0) & (column < data.shape[axis])).all()),
            f"scatter_nd_update: index out of range on axis {axis}",
        )
    data.index_put_(tuple(flat.unbind(1)), updates.reshape((-1, *data.shape[depth:])))
    return data


# npu_fused_infer_attention_score inputs no emulated case models (quantization, padding,
# shared prefixes, position bias); a call that sets one raises NotImplementedError.
UNMODELLED_ATTENTION_INPUTS = (
    "pse_shift", "dequant_scale1", "quant_scale1", "dequant_scale2", "quant_scale2",
    "quant_offset2", "antiquant_scale", "antiquant_offset", "key_antiquant_scale",
    "value_antiquant_scale", "query_padding_size", "kv_padding_size", "key_shared_prefix",
    "value_shared_prefix",
)


def npu_fused_infer_attention_score(a: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """Paged (block_table) attention, BSH or BSND, sparse_mode 0 (no mask) or 3 (causal).

    Rows past a batch's actual query length come back as NaN: their content is not
    specified, so a caller that reads them shows up in the results.
    """
    q, k, v = a["query"], a["key"], a["value"]
    layout = a["input_layout"]
    for name in (*UNMODELLED_ATTENTION_INPUTS, "query_rope", "key_rope"):
        if a[name] is not None:
            raise NotImplementedError(f"fused_infer_attention_score: {name} is not modelled")
    if layout not in ("BSH", "BSND"):
        raise NotImplementedError(f"fused_infer_attention_score: layout {layout} not modelled")
    if a["block_table"] is None:
        raise NotImplementedError("fused_infer_attention_score: only paged KV is modelled")
    _require(q.dtype in HALF_TYPES, f"fused_infer_attention_score: query dtype {q.dtype}")
    _require(k.dtype == v.dtype == q.dtype, "fused_infer_attention_score: kv dtype != query")
    for name, t in (("query", q), ("key", k), ("value", v)):
        _require(t.is_contiguous(), f"fused_infer_attention_score: {name} must be contiguous")
    _require(k.shape == v.shape, "fused_infer_attention_score: key and value shapes differ")

    n_q = a["num_heads"]
    n_kv = a["num_key_value_heads"] or n_q
    _require(n_q % n_kv == 0 and n_q // n_kv <= 64, "fused_infer_attention_score: GQA ratio")
    if layout == "BSH":
        _require(q.dim() == 3 and q.shape[2] % n_q == 0, "fused_infer_attention_score: BSH q")
        batch, q_s, d = q.shape[0], q.shape[1], q.shape[2] // n_q
        qh = q.view(batch, q_s, n_q, d)
    else:
        _require(q.dim() == 4 and q.shape[2] == n_q, "fused_infer_attention_score: BSND q")
        batch, q_s, d = q.shape[0], q.shape[1], q.shape[3]
        qh = q

    # Paged KV: BSH/BSND take the cache only as (num_blocks, block_size, H).
    table, block_size = a["block_table"], a["block_size"]
    _require(k.dim() == 3 and k.shape[2] == n_kv * d, "paged KV must be (blocks, size, H)")
    _require(block_size == k.shape[1], "block_size must equal the cache's block dimension")
    _require(table.dtype == torch.int32, "block_table must be int32")
    _require(table.dim() == 2 and table.shape[0] == batch, "block_table must be [B, max_blocks]")
    if q_s > 1:
        _require(
            block_size % 128 == 0 and 128 <= block_size <= 512,
            "paged prefill needs block_size a multiple of 128 in [128, 512]",
        )
    else:
        _require(
            block_size % 16 == 0 and 0 < block_size <= 512,
            "paged decode needs block_size a multiple of 16 up to 512",
        )
    kv_lens = _lengths(a["actual_seq_lengths_kv"], batch, None, "actual_seq_lengths_kv")
    q_lens = (
        [1] * batch
        if q_s == 1
        else _lengths(a["actual_seq_lengths"], batch, q_s, "actual_seq_lengths")
    )
    _require(max(kv_lens) <= table.shape[1] * block_size, "block_table too narrow for kv lens")

    causal = _mask_mode(a, q_s)
    out = torch.full((batch, q_s, n_q, d), float("nan"), dtype=F32)
    group = n_q // n_kv
    kf, vf = (
        k.to(F32).view(k.shape[0], block_size, n_kv, d),
        v.to(F32).view(v.shape[0], block_size, n_kv, d),
    )
    for b in range(batch):
        q_len, kv_len = q_lens[b], kv_lens[b]
        if q_len == 0:
            continue
        blocks = table[b, : math.ceil(kv_len / block_size)].long()
        keys = kf.index_select(0, blocks).reshape(-1, n_kv, d)[:kv_len]
        values = vf.index_select(0, blocks).reshape(-1, n_kv, d)[:kv_len]
        keys = keys.repeat_interleave(group, dim=1)
        values = values.repeat_interleave(group, dim=1)
        qb = qh[b, :q_len].to(F32)
        scores = torch.einsum("qhd,khd->hqk", qb, keys) * a["scale"]
        if causal:
            # rightDownCausal: row i sees keys up to kv_len - q_len + i
            rows = torch.arange(q_len).unsqueeze(1)
            cols = torch.arange(kv_len).unsqueeze(0)
            scores = scores.masked_fill(cols > rows + (kv_len - q_len), float("-inf"))
        out[b, :q_len] = torch.einsum("hqk,khd->qhd", scores.softmax(dim=-1), values)
    result = out.to(q.dtype).reshape(q.shape)
    return result, torch.zeros(1, dtype=F32)


def _lengths(values: Any, batch: int, limit: int | None, name: str) -> list[int]:
    _require(values is not None, f"fused_infer_attention_score: paged KV needs {name}")
    vals = [int(v) for v in values]
    _require(len(vals) == 1 or len(vals) >= batch, f"{name}: length 1 or at least B")
    vals = vals * batch if len(vals) == 1 else vals[:batch]
    _require(all(v >= 0 for v in vals), f"{name}: negative length")
    if limit is not None:
        _require(all(v <= limit for v in vals), f"{name}: longer than the query's S")
    return vals


def _mask_mode(a: dict[str, Any], q_s: int) -> bool:
    """Whether the rightDownCausal mask applies; checks the mask the mode demands."""
    mode, mask = a["sparse_mode"], a["atten_mask"]
    if q_s == 1:
        # sparse_mode has no effect with one query token; a mask there has other
        # shapes and meanings that are not modelled.
        if mask is not None:
            raise NotImplementedError("fused_infer_attention_score: a mask with Q_S=1")
        return False
    if mode == 0 and mask is None:
        return False
    if mode != 3:
        raise NotImplementedError(f"fused_infer_attention_score: sparse_mode {mode} not modelled")
    _require(mask is not None, "sparse_mode 3 needs the compressed 2048x2048 atten_mask")
    _require(mask.dtype in (torch.bool, torch.int8, torch.uint8), "atten_mask dtype")
    _require(
        tuple(mask.shape[-2:]) == (MASK_SIZE, MASK_SIZE)
        and mask.dim() <= 4
        and all(s == 1 for s in mask.shape[:-2]),
        "sparse_mode 3 mask must be 2048x2048",
    )
    expected = torch.ones(MASK_SIZE, MASK_SIZE, dtype=torch.bool).triu(diagonal=1)
    _require(
        torch.equal(mask.reshape(MASK_SIZE, MASK_SIZE).bool().cpu(), expected),
        "sparse_mode 3 mask must be True strictly above the diagonal",
    )
    return True


IMPLEMENTED = {
    "npu_rms_norm": npu_rms_norm,
    "npu_add_rms_norm": npu_add_rms_norm,
    "npu_swiglu": npu_swiglu,
    "npu_rotary_mul": npu_rotary_mul,
    "npu_scatter_nd_update_": npu_scatter_nd_update_,
    "npu_fused_infer_attention_score": npu_fused_infer_attention_score,
}
