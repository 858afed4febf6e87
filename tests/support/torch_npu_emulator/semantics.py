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


def npu_mrope(a: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """CANN's RopeWithSinCosCache: rows cos | sin of the cache at positions; the first
    rotary_dim channels of each head rotate, the rest pass through. Rope mode: positions
    (numTokens); mrope mode (mrope_section given, not [0, 0, 0]): positions (3, numTokens)
    and the rotary_dim / 2 frequencies in three segments, the first mrope_section[0] from
    the temporal row's cache row, the next [1] from the height row's, the last [2] from the
    width row's (cache_mode 'default', the docs' three-segment splicing)."""
    pos, q, k, cache = a["positions"], a["query"], a["key"], a["cos_sin_cache"]
    head_size, mode = a["head_size"], a["rotary_mode"]
    section = a["mrope_section"]
    mrope = section is not None and list(section) != [0, 0, 0]
    if a["cache_mode"] != "default":
        # 'interleave' splices cos and sin "interleaved"; the docs do not give its layout.
        raise NotImplementedError(f"npu_mrope: cache_mode {a['cache_mode']!r} not modelled")
    if mrope:
        _require(pos.dim() == 2 and pos.shape[0] == 3, "npu_mrope: mrope mode takes (3, T)")
        _require(len(section) == 3, "npu_mrope: mrope_section has three entries")
    elif pos.dim() != 1:
        # 2-D positions without a section: the docs name no rule for it.
        raise NotImplementedError("npu_mrope: 2-D positions without mrope_section")
    _require(pos.dtype in (torch.int32, torch.int64), "npu_mrope: positions int32/int64")
    _require(q.dim() == 2 and k.dim() == 2 and cache.dim() == 2, "npu_mrope: 2D inputs only")
    for t in (q, k, cache):
        _require(t.dtype in FLOAT_TYPES, f"npu_mrope: dtype {t.dtype} unsupported")
    rotary_dim = cache.shape[1]
    multiple = 16 if q.dtype == F32 else 32
    _require(rotary_dim % multiple == 0, f"npu_mrope: rotary_dim must be a multiple of {multiple}")
    _require(rotary_dim <= head_size, "npu_mrope: rotary_dim exceeds head_size")
    _require(
        q.shape[1] % head_size == 0 and k.shape[1] % head_size == 0,
        "npu_mrope: query/key width must be heads x head_size",
    )
    _require(q.shape[0] == k.shape[0] == pos.shape[-1], "npu_mrope: token counts differ")
    _require(bool(((pos >= 0) & (pos < cache.shape[0])).all()), "npu_mrope: position out of range")
    if mode not in ("half", "interleave"):
        raise ValueError(f"npu_mrope: rotary_mode {mode!r} is not half or interleave")
    if mrope:
        _require(
            sum(section) == rotary_dim // 2,
            "npu_mrope: mrope_section must sum to rotary_dim / 2",
        )
        rows = [cache.index_select(0, pos[i].long()).to(F32).chunk(2, dim=-1) for i in range(3)]
        bounds = (0, section[0], section[0] + section[1], rotary_dim // 2)
        cos = torch.cat([rows[i][0][:, bounds[i] : bounds[i + 1]] for i in range(3)], dim=-1)
        sin = torch.cat([rows[i][1][:, bounds[i] : bounds[i + 1]] for i in range(3)], dim=-1)
    else:
        cos, sin = cache.index_select(0, pos.long()).to(F32).chunk(2, dim=-1)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # [T, 1, rotary_dim / 2]

    def rope(x: torch.Tensor) -> torch.Tensor:
        heads = x.to(F32).view(x.shape[0], -1, head_size)
        rot, rest = heads[..., :rotary_dim], heads[..., rotary_dim:]
        if mode == "half":
            x1, x2 = rot.chunk(2, dim=-1)
            rot = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
        else:
            x1, x2 = rot[..., ::2], rot[..., 1::2]
            rot = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
        return torch.cat((rot, rest), dim=-1).reshape(x.shape).to(x.dtype)

    return rope(q), rope(k)


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


def npu_scatter_pa_kv_cache(a: dict[str, Any]) -> None:
    """Scenario 2 of the op doc with cache_mode "Norm" (ND caches): key/value [T, H, D],
    caches [blocks, block_size, H, D], slot_mapping [T]; row t goes to slot[t]."""
    key, value, kc, vc, slots = (
        a["key"],
        a["value"],
        a["key_cache"],
        a["value_cache"],
        a["slot_mapping"],
    )
    if a["cache_mode"] not in (None, "Norm"):
        raise NotImplementedError(f"scatter_pa_kv_cache: cache_mode {a['cache_mode']!r}")
    if any(a[n] is not None for n in ("compress_lens", "compress_seq_offsets", "seq_lens")):
        raise NotImplementedError("scatter_pa_kv_cache: the compressed scenario")
    _require(key.dim() == 3 and value.dim() == 3, "scatter_pa_kv_cache: 3D key/value only")
    _require(kc.dim() == 4 and vc.dim() == 4, "scatter_pa_kv_cache: caches must be 4D")
    for name, t in (("key", key), ("value", value), ("key_cache", kc), ("value_cache", vc)):
        _require(t.is_contiguous(), f"scatter_pa_kv_cache: {name} must be contiguous")
    _require(key.dtype == value.dtype == kc.dtype == vc.dtype, "scatter_pa_kv_cache: dtypes")
    _require(slots.dtype in (torch.int32, torch.int64), "scatter_pa_kv_cache: slots int32/64")
    _require(key.shape[:2] == value.shape[:2], "scatter_pa_kv_cache: key/value first dims")
    _require(slots.dim() == 1 and slots.shape[0] == key.shape[0], "scatter_pa_kv_cache: slots")
    _require(tuple(kc.shape[2:]) == tuple(key.shape[1:]), "scatter_pa_kv_cache: key_cache shape")
    _require(tuple(vc.shape[2:]) == tuple(value.shape[1:]), "scatter_pa_kv_cache: value_cache")
    capacity = kc.shape[0] * kc.shape[1]
    flat = slots.long()
    # out-of-range or repeated slots are undefined on the device: refuse them here
    _require(bool(((flat >= 0) & (flat < capacity)).all()), "scatter_pa_kv_cache: slot range")
    _require(flat.unique().numel() == flat.numel(), "scatter_pa_kv_cache: repeated slots")
    kc.view(capacity, *kc.shape[2:]).index_copy_(0, flat, key)
    vc.view(capacity, *vc.shape[2:]).index_copy_(0, flat, value)


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
        from support.torch_npu_emulator.semantics_encoder import dense_attention

        return dense_attention(a)
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

    causal, band, decode_mask = _mask_mode(a, q_s, batch, table.shape[1] * block_size)
    out = torch.full((batch, q_s, n_q, d), float("nan"), dtype=F32, device=q.device)
    # softmax_lse_flag: (B, N, S, 1) float32 (rows past a query length NaN), else [0].
    lse = torch.full((batch, n_q, q_s, 1), float("nan"), dtype=F32, device=q.device)
    group = n_q // n_kv
    # Only the blocks each sequence reads are converted: a real kernel allocates nothing
    # the size of the cache, and on the emulated device temporaries count as device memory.
    kf, vf = (
        k.view(k.shape[0], block_size, n_kv, d),
        v.view(v.shape[0], block_size, n_kv, d),
    )
    for b in range(batch):
        q_len, kv_len = q_lens[b], kv_lens[b]
        if q_len == 0:
            continue
        blocks = table[b, : math.ceil(kv_len / block_size)].long()
        keys = kf.index_select(0, blocks).to(F32).reshape(-1, n_kv, d)[:kv_len]
        values = vf.index_select(0, blocks).to(F32).reshape(-1, n_kv, d)[:kv_len]
        keys = keys.repeat_interleave(group, dim=1)
        values = values.repeat_interleave(group, dim=1)
        qb = qh[b, :q_len].to(F32)
        scores = torch.einsum("qhd,khd->hqk", qb, keys) * a["scale"]
        rows = torch.arange(q_len, device=q.device).unsqueeze(1)
        cols = torch.arange(kv_len, device=q.device).unsqueeze(0)
        diagonal = rows + (kv_len - q_len)  # the right-down corner's diagonal
        masked = None
        if causal:  # rightDownCausal: row i sees keys up to kv_len - q_len + i
            masked = cols > diagonal
        elif band is not None:  # band, origin right-down: diagonal - pre .. diagonal + next
            pre, nxt = band
            masked = (cols < diagonal - pre) | (cols > diagonal + nxt)
        elif decode_mask is not None:  # Q_S = 1: the mask's row, True = masked
            masked = decode_mask[b, :kv_len].bool().unsqueeze(0)
        if masked is not None:
            scores = scores.masked_fill(masked, float("-inf"))
            # A key no row sees is not read (its block may be vLLM's null block, NaN here).
            values = values.masked_fill(masked.all(dim=0)[:, None, None], 0.0)
        out[b, :q_len] = torch.einsum("hqk,khd->qhd", scores.softmax(dim=-1), values)
        lse[b, :, :q_len, 0] = torch.logsumexp(scores, dim=-1)
    result = out.to(q.dtype).reshape(q.shape)
    if a["softmax_lse_flag"]:
        return result, lse
    return result, torch.zeros(1, dtype=F32, device=q.device)


def _lengths(values: Any, batch: int, limit: int | None, name: str) -> list[int]:
    _require(values is not None, f"fused_infer_attention_score: paged KV needs {name}")
    vals = [int(v) for v in values]
    _require(len(vals) == 1 or len(vals) >= batch, f"{name}: length 1 or at least B")
    vals = vals * batch if len(vals) == 1 else vals[:batch]
    _require(all(v >= 0 for v in vals), f"{name}: negative length")
    if limit is not None:
        _require(all(v <= limit for v in vals), f"{name}: longer than the query's S")
    return vals


def _mask_mode(
    a: dict[str, Any], q_s: int, batch: int, paged_width: int
) -> tuple[bool, tuple[int, int] | None, torch.Tensor | None]:
    """(rightDownCausal, band (pre_tokens, next_tokens) or None, a Q_S=1 mask or None);
    checks the mask each mode demands."""
    mode, mask = a["sparse_mode"], a["atten_mask"]
    if q_s == 1:
        # sparse_mode, pre_tokens and next_tokens have no effect with one query token; a
        # mask there is (B, KV_S) (other shapes not modelled), and on a paged cache at
        # least block_table's width times block_size wide.
        if mask is None:
            return False, None, None
        _require(mask.dtype in (torch.bool, torch.int8, torch.uint8), "atten_mask dtype")
        if mask.dim() != 2:
            raise NotImplementedError("fused_infer_attention_score: a Q_S=1 mask not (B, KV_S)")
        _require(mask.shape[0] == batch, "Q_S=1 atten_mask must be (B, KV_S)")
        _require(mask.shape[1] >= paged_width, "paged atten_mask narrower than the block table")
        _require(mask.is_contiguous(), "atten_mask must be contiguous")
        return False, None, mask
    if mode == 0 and mask is None:
        return False, None, None
    if mode not in (3, 4):
        raise NotImplementedError(f"fused_infer_attention_score: sparse_mode {mode} not modelled")
    _require(mask is not None, f"sparse_mode {mode} needs the compressed 2048x2048 atten_mask")
    _require(mask.dtype in (torch.bool, torch.int8, torch.uint8), "atten_mask dtype")
    _require(
        tuple(mask.shape[-2:]) == (MASK_SIZE, MASK_SIZE)
        and mask.dim() <= 4
        and all(s == 1 for s in mask.shape[:-2]),
        f"sparse_mode {mode} mask must be 2048x2048",
    )
    expected = torch.ones(MASK_SIZE, MASK_SIZE, dtype=torch.bool, device=mask.device).triu(1)
    _require(
        torch.equal(mask.reshape(MASK_SIZE, MASK_SIZE).bool(), expected),
        f"sparse_mode {mode} mask must be True strictly above the diagonal",
    )
    if mode == 3:
        return True, None, None
    pre, nxt = int(a["pre_tokens"]), int(a["next_tokens"])
    # Band: the two bounds must leave a band (the docs: they need an intersection).
    _require(pre + nxt >= 0, "band mode: pre_tokens and next_tokens leave nothing to compute")
    return False, (pre, nxt), None


IMPLEMENTED = {
    "npu_rms_norm": npu_rms_norm,
    "npu_add_rms_norm": npu_add_rms_norm,
    "npu_swiglu": npu_swiglu,
    "npu_rotary_mul": npu_rotary_mul,
    "npu_mrope": npu_mrope,
    "npu_scatter_nd_update_": npu_scatter_nd_update_,
    "npu_scatter_pa_kv_cache": npu_scatter_pa_kv_cache,
    "npu_fused_infer_attention_score": npu_fused_infer_attention_score,
}


# -- quantized matmul ------------------------------------------------------------------
# From the 2.14.0 op docs: npu_dynamic_quant (scale = rowMax(|x|) / 127, y = round(x /
# scale)), npu_quantize (div_mode False: x * scales + zero_points), npu_trans_quant_param
# (float32 -> int64 scale, round_mode 0 truncates the float32 to FP19), npu_quant_matmul
# (x1 [m, k] int8 by x2 [k, n] int8, int32 bias added before dequantization, scale then
# pertoken_scale). Rounding to int8 is taken as half-to-even with saturation, which the
# docs do not state; the FP19 scale is modelled as the float32 with its low 13 mantissa
# bits cleared, held in the low 32 bits of the int64 (the real packing may set other bits).
INT8_MAX = 127
_FP19_KEEP = -(1 << 13)


def _to_int8(values: torch.Tensor) -> torch.Tensor:
    return torch.round(values).clamp(-128, INT8_MAX).to(torch.int8)


def npu_dynamic_quant(a: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    x = a["input"]
    _require(x.dtype in HALF_TYPES, f"npu_dynamic_quant: x dtype {x.dtype} (fp16/bf16 only)")
    _require(x.dim() > 1, "npu_dynamic_quant: x must have more than one dimension")
    if a["smooth_scales"] is not None or a["group_index"] is not None:
        raise NotImplementedError("npu_dynamic_quant: smooth_scales/group_index not modelled")
    if a["dst_type"] not in (None, torch.int8) or a["quant_mode"] != "pertoken":
        raise NotImplementedError("npu_dynamic_quant: only int8 per-token is modelled")
    xf = x.to(F32)
    scale = xf.abs().amax(dim=-1) / INT8_MAX
    divisor = torch.where(scale > 0, scale, torch.ones_like(scale)).unsqueeze(-1)
    y = torch.where(scale.unsqueeze(-1) > 0, xf / divisor, torch.zeros_like(xf))
    return _to_int8(y), scale


def npu_quantize(a: dict[str, Any]) -> torch.Tensor:
    x, scales, zero_points = a["self"], a["scales"], a["zero_points"]
    if a["div_mode"] or a["dtype"] is not torch.qint8:
        raise NotImplementedError("npu_quantize: only div_mode=False to torch.qint8 is modelled")
    _require(x.dtype in FLOAT_TYPES, f"npu_quantize: input dtype {x.dtype}")
    _require(scales.dtype in FLOAT_TYPES, f"npu_quantize: scales dtype {scales.dtype}")
    # torch_npu 2.x docs: with div_mode False the scales take the input's dtype and format.
    _require(scales.dtype == x.dtype,
             f"npu_quantize: scales dtype {scales.dtype} is not the input's {x.dtype}")
    _require(
        zero_points is None
        or (zero_points.dtype == scales.dtype and zero_points.shape == scales.shape),
        "npu_quantize: with div_mode=False zero_points must have the scales' shape and dtype",
    )
    axis = a["axis"]
    _require(axis >= -2 and axis < x.dim(), f"npu_quantize: axis {axis}")
    _require(axis != -2, "npu_quantize: axis -2 is not modelled")
    _require(scales.dim() == 1 and scales.shape[0] in (1, x.shape[-1]),
             "npu_quantize: 1-D scales of size 1 or the last dimension")
    y = x.to(F32) * scales.to(F32)
    if zero_points is not None:
        y = y + zero_points.to(F32)
    return _to_int8(y)


def npu_trans_quant_param(a: dict[str, Any]) -> torch.Tensor:
    scale = a["scale"]
    _require(scale.dtype == F32, "npu_trans_quant_param: scale must be float32")
    _require(scale.dim() == 1 or (scale.dim() == 2 and scale.shape[0] == 1),
             "npu_trans_quant_param: scale shape (t,) or (1, n)")
    if a["offset"] is not None or a["round_mode"] not in (None, 0):
        raise NotImplementedError("npu_trans_quant_param: offset / round_mode 1 not modelled")
    bits = scale.contiguous().view(torch.int32) & _FP19_KEEP
    return bits.to(torch.int64) & 0xFFFFFFFF


def _scale_values(scale: torch.Tensor) -> torch.Tensor:
    if scale.dtype == torch.int64:
        return (scale & 0xFFFFFFFF).to(torch.int32).view(F32)  # int64 from trans_quant_param
    return scale.to(F32)


def npu_quant_matmul(a: dict[str, Any]) -> torch.Tensor:
    x1, x2, scale = a["x1"], a["x2"], a["scale"]
    pertoken, bias, out_dtype = a["pertoken_scale"], a["bias"], a["output_dtype"]
    unmodelled = ("offset", "x1_dtype", "x2_dtype", "pertoken_scale_dtype", "scale_dtype",
                  "group_sizes", "y_scale")
    if any(a[k] is not None for k in unmodelled):
        raise NotImplementedError("npu_quant_matmul: offset and the dtype/group args")
    _require(x1.dtype == torch.int8 and x2.dtype == torch.int8, "npu_quant_matmul: int8 x1, x2")
    if x1.dim() != 2 or x2.dim() != 2:
        raise NotImplementedError("npu_quant_matmul: only 2-D x1 [m, k] and x2 [k, n]")
    m, k = x1.shape
    _require(x2.shape[0] == k, f"npu_quant_matmul: x2 must be [k={k}, n], not {tuple(x2.shape)}")
    n = x2.shape[1]
    _require(k <= 65535 and n <= 65535, "npu_quant_matmul: k and n at most 65535")
    _require(scale.dim() == 1 and scale.shape[0] in (1, n), "npu_quant_matmul: scale (1,) or (n,)")
    _require(out_dtype in HALF_TYPES, f"npu_quant_matmul: output_dtype {out_dtype} not modelled")
    if pertoken is not None:
        _require(pertoken.dtype == F32 and tuple(pertoken.shape) == (m,),
                 "npu_quant_matmul: pertoken_scale float32 (m,)")
        _require(scale.dtype in (F32, torch.bfloat16),
                 "npu_quant_matmul: with pertoken_scale the scale is float32/bfloat16")
    elif out_dtype == torch.bfloat16:
        _require(scale.dtype in (F32, torch.bfloat16),
                 "npu_quant_matmul: bfloat16 output takes a float32/bfloat16 scale")
    else:
        _require(scale.dtype in (F32, torch.int64), "npu_quant_matmul: fp16 output scale")
    if bias is not None:
        if bias.dtype != torch.int32:
            raise NotImplementedError("npu_quant_matmul: only an int32 bias is modelled")
        _require(bias.dim() == 1 and bias.shape[0] == n, "npu_quant_matmul: bias (n,)")
    acc = x1.to(torch.int64) @ x2.to(torch.int64)
    if bias is not None:
        acc = acc + bias.to(torch.int64)
    _require(bool((acc.abs() < 2**31).all()), "npu_quant_matmul: int32 accumulator overflow")
    y = acc.to(torch.int32).to(F32) * _scale_values(scale)
    if pertoken is not None:
        y = y * pertoken.unsqueeze(-1)
    return y.to(out_dtype)


IMPLEMENTED.update(
    {
        "npu_dynamic_quant": npu_dynamic_quant,
        "npu_quantize": npu_quantize,
        "npu_trans_quant_param": npu_trans_quant_param,
        "npu_quant_matmul": npu_quant_matmul,
    }
)
