"""The ops port in plain torch on the host: the reference semantics every device matches.

Precision: norms, rotary, attention and silu_and_mul compute in float32 and round once
to the input dtype at the op's output, as the NPU's ops compute them. No native code:
adapters/cpu/ops.py is the accelerated host path, with this as its fallback, and this
class is the golden reference of the NPU adapter's ops.
"""

from __future__ import annotations

import math

import torch

from adapters.cpu import vision_ops
from ports.ops import AttentionPart, AttentionPlan, AttentionPlanNeeds, IndexDtype, Ops

_F32 = torch.float32
_Slots = tuple[torch.Tensor, torch.Tensor]  # flat context slots, and validity [B, L]
# Where write_kv_cache writes: block, offset, and the kept token rows (None: all of them).
_Writes = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]

def swiglu(x: torch.Tensor) -> torch.Tensor:
    """silu(first half) * second half of the last dim, in float32, rounded once.

    One rounding at the output, as torch_npu's npu_swiglu and vLLM's fused silu_and_mul
    kernels compute it; in float32 it is the plain formula.
    """
    d = x.shape[-1] // 2
    xf = x.to(_F32)
    return (torch.nn.functional.silu(xf[..., :d]) * xf[..., d:]).to(x.dtype)


class ReferenceOps(Ops):
    """Ops on host tensors in plain torch. Holds only scratch buffers that paged_attention
    reuses, and what it derives once per step from the step's plan."""

    plan_needs = AttentionPlanNeeds(block_table_dtype=IndexDtype.INT64)

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}
        self._views: dict[str, tuple[tuple[int, ...], torch.Tensor]] = {}  # last per name
        # The context slots of the last plan seen, per part: every layer of a step passes
        # the same AttentionPlan, so they are gathered once per step, not per layer.
        self._slots_of: tuple[AttentionPlan, dict[str, _Slots]] | None = None
        # The same for write_kv_cache: the step's slot mapping tensor is shared by every
        # layer, so its (block, offset) split is computed once per step.
        self._writes_of: tuple[torch.Tensor, int, _Writes] | None = None
        # The decode step's additive mask (None: every position valid), per validity.
        self._mask_of: tuple[torch.Tensor, torch.Tensor | None] | None = None

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """Normalise and scale by weight in float32, rounded once to x's dtype.

        One rounding at the output, as torch_npu's npu_rms_norm computes it (and vLLM's
        fused kernels); Hugging Face's PyTorch RMSNorm rounds before the weight product,
        so half-precision results can differ from it by one ulp.
        """
        if x.dtype == _F32 and weight.dtype == _F32:
            # torch's fused kernel: the same float32 arithmetic in one pass (0.0 apart
            # from the spelled-out form, measured), 1.5x faster at decode shapes.
            return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)
        xf = x.to(_F32)
        variance = xf.pow(2).mean(dim=-1, keepdim=True)
        # A weight of another dtype takes x's first, as npu_rms_norm requires gamma's.
        return (xf * torch.rsqrt(variance + eps) * weight.to(x.dtype).to(_F32)).to(x.dtype)

    def add_rms_norm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The sum is taken in float32 and returned in x's dtype; the norm is of that sum."""
        if x.dtype == _F32 and residual.dtype == _F32:
            summed = x + residual
        else:
            summed = (x.to(_F32) + residual.to(_F32)).to(x.dtype)
        return self.rms_norm(summed, weight, eps), summed

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        return swiglu(x)

    def rotary_embedding(
        self,
        positions: torch.Tensor,
        query: torch.Tensor,
        key: torch.Tensor,
        cos_sin_cache: torch.Tensor,
        head_size: int,
        rotary_dim: int,
        is_neox_style: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """New tensors of the input shapes; channels past rotary_dim are copied unchanged.

        Neox style rotates the halves (x[:r/2], x[r/2:r]); GPT-J style rotates the
        interleaved pairs (x[0::2], x[1::2]). positions is [T] (any shape that
        flattens to the token count of query).
        """
        cos_sin = cos_sin_cache.index_select(0, positions.reshape(-1).long()).to(_F32)
        cos, sin = cos_sin.chunk(2, dim=-1)  # [T, rotary_dim / 2] each
        cos = cos.unsqueeze(1)
        sin = sin.unsqueeze(1)
        return (
            _rotate(query, cos, sin, head_size, rotary_dim, is_neox_style),
            _rotate(key, cos, sin, head_size, rotary_dim, is_neox_style),
        )

    def mrope(
        self,
        positions: torch.Tensor,
        query: torch.Tensor,
        key: torch.Tensor,
        cos_sin_cache: torch.Tensor,
        head_size: int,
        rotary_dim: int,
        mrope_section: tuple[int, int, int],
        interleaved: bool,
        is_neox_style: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """rotary_embedding's rotation with each frequency's row taken from its section's
        position (float32 inside, one rounding at the output)."""
        cos, sin = vision_ops.mrope_tables(positions, cos_sin_cache, mrope_section, interleaved)
        return (
            _rotate(query, cos, sin, head_size, rotary_dim, is_neox_style),
            _rotate(key, cos, sin, head_size, rotary_dim, is_neox_style),
        )

    def encoder_attention(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        seq_lens: tuple[int, ...],
        scale: float,
    ) -> torch.Tensor:
        return vision_ops.encoder_attention(query, key, value, seq_lens, scale)

    def write_kv_cache(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        """Scatter in place; caches may be any strided views (written through, never copied).

        key/value may carry padding tokens past len(slot_mapping); those are ignored.
        Values are cast to the cache dtype.
        """
        block_size = key_cache.shape[1]
        memo = self._writes_of
        if memo is None or memo[0] is not slot_mapping or memo[1] != block_size:
            memo = (slot_mapping, block_size, _write_positions(slot_mapping, block_size))
            self._writes_of = memo
        blocks, offsets, idx = memo[2]
        n = slot_mapping.numel()
        if idx is not None:
            key = key[:n].index_select(0, idx)
            value = value[:n].index_select(0, idx)
        elif key.shape[0] != n:  # sliced only when there are padding rows (aten ops per layer)
            key = key[:n]
            value = value[:n]
        if key.dtype != key_cache.dtype:
            key = key.to(key_cache.dtype)
        if value.dtype != value_cache.dtype:
            value = value.to(value_cache.dtype)
        # Two-index index_put_ writes through views of any stride, so a cache that is a
        # slice of a larger [num_blocks, 2, ...] allocation is updated where it lives.
        key_cache.index_put_((blocks, offsets), key)
        value_cache.index_put_((blocks, offsets), value)

    def paged_attention(
        self,
        query: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        plan: AttentionPlan,
        scale: float,
        out: torch.Tensor,
        *,
        window: int | None = None,
        sinks: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Batched over sequences (no per-sequence Python loop); computes in float32.

        The plan's decode sequences go through a gather and one SDPA whose query rows
        are each kv head's query group (K/V never copied per query head); its prefill
        sequences through one scaled_dot_product_attention over a padded batch (causal
        flag for fresh prefills, an explicit mask when earlier context is cached). Rows
        of `out` past num_actual_tokens are left untouched. Not safe for concurrent
        calls on one instance: gathered context lands in reused scratch buffers.
        A window or sinks take _attend_masked instead: explicit scores, one mask for
        causality, the window and the lengths, the sink as one more softmax column.
        """
        n_tok = plan.num_actual_tokens
        parts = plan.parts
        if not parts or n_tok == 0:
            return out
        # Rows past num_actual_tokens are padding; slice only when there are any (each
        # slice is aten ops, in every layer of every step).
        if query.shape[0] != n_tok:
            query = query[:n_tok]
        caches = (key_cache, value_cache)

        def attend(part: AttentionPart, rows: torch.Tensor) -> torch.Tensor:
            if window is None and sinks is None:
                return self._attend(part, rows, caches, plan, scale)
            return _attend_masked(part, rows, caches, scale, window, sinks)

        if len(parts) == 1:  # one kind of sequence: its tokens are all tokens, in order
            rows = out if out.shape[0] == n_tok else out[:n_tok]
            rows.copy_(attend(parts[0], query))
            return out
        # Mixed batch: decodes and prefills go their own ways, then meet in `out`.
        for part in parts:
            result = attend(part, query.index_select(0, part.tokens))
            out.index_copy_(0, part.tokens, result.to(out.dtype))
        return out

    def _attend(
        self,
        part: AttentionPart,
        query: torch.Tensor,
        caches: tuple[torch.Tensor, torch.Tensor],
        plan: AttentionPlan,
        scale: float,
    ) -> torch.Tensor:
        """The part's attention rows [n, Hq, D], for its queries [n, Hq, D]."""
        context = self._context(plan, part, caches[0].shape[1])
        if part.is_decode:
            return self._decode(query, caches, context, scale)
        return self._prefill(query, caches, context, part, scale)

    def _context(self, plan: AttentionPlan, part: AttentionPart, block_size: int) -> _Slots:
        """The part's context slots, once per step (every layer passes the same plan)."""
        if self._slots_of is None or self._slots_of[0] is not plan:
            self._slots_of = (plan, {})
        memo = self._slots_of[1]
        name = "decode" if part.is_decode else "prefill"
        if name not in memo:
            memo[name] = _context_slots(part.block_table, part.seq_lens, block_size)
        return memo[name]

    def _decode(
        self,
        query: torch.Tensor,
        caches: tuple[torch.Tensor, torch.Tensor],
        context: _Slots,
        scale: float,
    ) -> torch.Tensor:
        """One new token per sequence: query [B, Hq, D] -> [B, Hq, D] in float32.

        On float32 copies of the gathered K/V even in bf16: attending on the bf16 rows
        directly measured 1.08-1.10x faster per call, but torch's CPU flash kernel then
        rounds the softmax weights to bf16 before they weight V, a second rounding the
        precision contract (README) and the emulated NPU's attention do not have, and
        the emulated NPU runs then gave other greedy ids than the host
        (docs/benchmarks.md, Round 5).
        """
        num_seqs, num_q_heads, head_size = query.shape
        num_kv_heads = caches[0].shape[2]
        group = num_q_heads // num_kv_heads
        slots, valid = context
        ctx_len = valid.shape[1]
        keys = self._gather(caches[0], slots, "key")
        values = self._gather(caches[1], slots, "value")
        # GQA folded into the query rows: each kv head attends for its `group` query heads
        # as one [group, D] query block, so one SDPA call reads the gathered K/V through
        # strided views (no per-head loop, no repeat of K/V). Measured 1.2-1.4x faster
        # than per-kv-head batched matmuls at 16 x 192..512 (scripts/bench_ops.py).
        q = query.to(_F32).view(num_seqs, num_kv_heads, group, head_size)
        result = torch.nn.functional.scaled_dot_product_attention(
            q,
            keys.view(num_seqs, ctx_len, num_kv_heads, head_size).transpose(1, 2),
            values.view(num_seqs, ctx_len, num_kv_heads, head_size).transpose(1, 2),
            attn_mask=self._decode_mask(valid),
            scale=scale,
        )  # [B, Hk, group, D]
        return result.reshape(num_seqs, num_q_heads, head_size)

    def _decode_mask(self, valid: torch.Tensor) -> torch.Tensor | None:
        """The additive float32 mask [B, 1, 1, L] of `valid`, or None when every position
        is valid (all sequences of the same length), derived once per step.

        Adding 0.0 or -inf is what SDPA does with a boolean mask, so float32 results are
        the same; built here once, not converted inside SDPA in every layer.
        """
        if self._mask_of is not None and self._mask_of[0] is valid:
            return self._mask_of[1]
        mask = None
        if not bool(valid.all()):
            mask = torch.zeros(valid.shape, dtype=_F32).masked_fill_(~valid, float("-inf"))
            mask = mask[:, None, None, :]
        self._mask_of = (valid, mask)
        return mask

    def _prefill(
        self,
        query: torch.Tensor,
        caches: tuple[torch.Tensor, torch.Tensor],
        context: _Slots,
        part: AttentionPart,
        scale: float,
    ) -> torch.Tensor:
        """Any query lengths: pad to [B, Hq, max_q, D], one SDPA, unpad. Float32 (bf16
        read directly measured 0.9-1.0x here, scripts/bench_attention.py --prefill).
        Sequences that all have max_q new tokens need no padding: the query is viewed."""
        n_tok, num_q_heads, head_size = query.shape
        num_seqs = part.num_seqs
        num_kv_heads = caches[0].shape[2]
        max_q = part.max_query_len
        slots, valid = context
        ctx_len = valid.shape[1]
        keys = self._gather(caches[0], slots, "key").view(num_seqs, ctx_len, num_kv_heads, -1)
        values = self._gather(caches[1], slots, "value").view(num_seqs, ctx_len, num_kv_heads, -1)

        flat_pos = None  # None: no padding, token t of the batch is row t
        if n_tok == num_seqs * max_q:  # every sequence has max_q tokens (none has more)
            q_pad = query.to(_F32)
        else:
            flat_pos = part.padded_rows
            q_pad = torch.zeros(num_seqs * max_q, num_q_heads, head_size)
            q_pad.index_copy_(0, flat_pos, query.to(_F32))
        q_pad = q_pad.view(num_seqs, max_q, num_q_heads, head_size).transpose(1, 2)

        mask = None
        fresh = part.actual_query_lens == part.actual_seq_lens
        if not fresh:
            # Row i sees positions <= seq_len - q_len + i and never past seq_len, so
            # padded rows stay finite (they are dropped below).
            last = (part.seq_lens - part.query_lens).unsqueeze(1) + torch.arange(max_q).unsqueeze(0)
            mask = torch.arange(ctx_len)[None, None, :] <= last[:, :, None]
            mask = (mask & valid[:, None, :]).unsqueeze(1)  # [B, 1, max_q, L]
        # A fresh prefill is plain causal attention over its own tokens (ctx_len ==
        # max_q); the causal flag lets the kernel skip the upper triangle.
        attn = torch.nn.functional.scaled_dot_product_attention(
            q_pad,
            keys.transpose(1, 2),
            values.transpose(1, 2),
            attn_mask=mask,
            is_causal=fresh,
            scale=scale,
            enable_gqa=num_q_heads != num_kv_heads,
        )  # [B, Hq, max_q, D]
        attn = attn.transpose(1, 2).reshape(num_seqs * max_q, num_q_heads, head_size)
        return attn if flat_pos is None else attn.index_select(0, flat_pos)

    def _gather(self, cache: torch.Tensor, slots: torch.Tensor, name: str) -> torch.Tensor:
        """Cache rows at flat `slots` as [N, Hk, D] float32, in a reused scratch buffer.

        Reuse matters on the host: a fresh multi-megabyte tensor per call costs more
        in page faults than the copy itself.
        """
        num_blocks, block_size, num_kv_heads, head_size = cache.shape
        shape = (slots.shape[0], num_kv_heads, head_size)
        try:
            flat = cache.view(num_blocks * block_size, num_kv_heads, head_size)
        except RuntimeError:  # a strided view whose block rows cannot merge
            flat = None
        if flat is None:
            blocks = torch.div(slots, block_size, rounding_mode="floor")
            rows = cache[blocks, slots - blocks * block_size]
        else:
            rows = self._scratch(name, shape, cache.dtype)
            torch.index_select(flat, 0, slots, out=rows)
        if rows.dtype == _F32:
            return rows
        rows32 = self._scratch(name + "32", shape, _F32)
        rows32.copy_(rows)
        return rows32

    def _scratch(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        # Every layer of a step asks for the same shape: the last view is handed out
        # again (a slice and a view less per call) while it fits the buffer it came from.
        last = self._views.get(name)
        if last is not None and last[0] == shape and last[1].dtype == dtype:
            return last[1]
        numel = math.prod(shape)
        buf = self._buffers.get(name)
        if buf is None or buf.dtype != dtype or buf.numel() < numel:
            buf = torch.empty(numel, dtype=dtype)
            self._buffers[name] = buf
        view = buf[:numel].view(shape)
        self._views[name] = (shape, view)
        return view


def _rotate(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    is_neox_style: bool,
) -> torch.Tensor:
    shape = x.shape
    heads = x.reshape(shape[0], -1, head_size)
    rot = heads[..., :rotary_dim].to(_F32)
    if is_neox_style:
        x1, x2 = rot.chunk(2, dim=-1)
        rotated = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    else:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
        rotated = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
    if rotary_dim == head_size:  # nothing passes through: no copy of the input
        return rotated.to(x.dtype).reshape(shape)
    result = heads.clone()
    result[..., :rotary_dim] = rotated.to(x.dtype)
    return result.reshape(shape)


def _write_positions(slot_mapping: torch.Tensor, block_size: int) -> _Writes:
    """(block, offset) of each slot >= 0, and the indices of those tokens when some are
    -1 (padding, skipped), else None."""
    slots = slot_mapping.reshape(-1).long()
    valid = slots >= 0
    idx = None
    if not bool(valid.all()):
        idx = valid.nonzero().squeeze(1)
        slots = slots.index_select(0, idx)
    blocks = torch.div(slots, block_size, rounding_mode="floor")
    return blocks, slots - blocks * block_size, idx


def _context_slots(block_table: torch.Tensor, seq_lens: torch.Tensor, block_size: int) -> _Slots:
    """Flat cache slots of positions 0 .. max(seq_lens) - 1 of each sequence, and validity.

    Positions past a sequence's length point at its position 0, a row that was
    written: unused cache memory may hold NaN, and NaN times a zero attention
    weight is still NaN.
    """
    ctx_len = int(seq_lens.max())
    pos = torch.arange(ctx_len)
    slots = block_table.index_select(1, pos // block_size) * block_size + pos % block_size
    valid = pos.unsqueeze(0) < seq_lens.unsqueeze(1)
    slots = torch.where(valid, slots, block_table[:, :1] * block_size)
    return slots.reshape(-1), valid


def _attend_masked(
    part: AttentionPart,
    query: torch.Tensor,
    caches: tuple[torch.Tensor, torch.Tensor],
    scale: float,
    window: int | None,
    sinks: torch.Tensor | None,
) -> torch.Tensor:
    """The part's attention rows [n, Hq, D] with a sliding window and/or sink logits, in
    float32 and plain torch (the reference the NPU's window and sink arguments match).

    Each sequence reads only the positions some row of it may see: from its first new
    token's window start (vLLM's null block may stand before it) to its length; padded
    query rows are computed and dropped.
    """
    _, num_q_heads, head_size = query.shape
    block_size, num_kv_heads = caches[0].shape[1], caches[0].shape[2]
    group = num_q_heads // num_kv_heads
    num_seqs, max_q = part.num_seqs, part.max_query_len
    start = part.seq_lens - part.query_lens  # absolute position of each first new token
    first = torch.zeros_like(start) if window is None else (start - window + 1).clamp(min=0)
    span = int((part.seq_lens - first).max())
    pos = first.unsqueeze(1) + torch.arange(span).unsqueeze(0)  # [b, L] absolute
    in_seq = pos < part.seq_lens.unsqueeze(1)
    # Positions past a sequence's end read its last token (written; unused memory may
    # hold NaN, and NaN times a zero weight is NaN); they are masked below.
    readable = torch.where(in_seq, pos, (part.seq_lens - 1).unsqueeze(1))
    table = part.block_table.long()
    slots = table.gather(1, readable // block_size) * block_size + readable % block_size
    flat = slots.reshape(-1)
    keys, values = (
        c.reshape(-1, num_kv_heads, head_size).index_select(0, flat).to(_F32)
        .view(num_seqs, span, num_kv_heads, head_size).permute(0, 2, 1, 3)
        for c in caches
    )  # [b, Hk, L, D]
    q_pad = torch.zeros(num_seqs * max_q, num_q_heads, head_size, dtype=_F32)
    q_pad.index_copy_(0, part.padded_rows, query.to(_F32))
    q = q_pad.view(num_seqs, max_q, num_kv_heads, group, head_size).permute(0, 2, 3, 1, 4)
    scores = torch.einsum("bhgqd,bhld->bhgql", q, keys) * scale  # [b, Hk, g, max_q, L]
    row_pos = start.unsqueeze(1) + torch.arange(max_q).unsqueeze(0)  # [b, max_q]
    seen = (pos.unsqueeze(1) <= row_pos.unsqueeze(2)) & in_seq.unsqueeze(1)  # [b, max_q, L]
    if window is not None:
        seen &= pos.unsqueeze(1) > (row_pos - window).unsqueeze(2)
    scores = scores.masked_fill(~seen[:, None, None], float("-inf"))
    attn = torch.einsum("bhgql,bhld->bqhgd", scores.softmax(dim=-1), values)
    if sinks is not None:
        # sum_j e^s_j v_j / (e^sink + sum_j e^s_j) = attn * sigmoid(lse - sink), with the
        # sink-free rows rounded to the query's dtype first: the NPU's contract (its fused
        # op returns them rounded, with the LSE in float32); in float32 the plain formula.
        lse = torch.logsumexp(scores, dim=-1).permute(0, 3, 1, 2).unsqueeze(-1)
        sink = sinks.to(_F32).view(1, 1, num_kv_heads, group, 1)
        attn = attn.to(query.dtype).to(_F32) * torch.sigmoid(lse - sink)
    attn = attn.reshape(num_seqs * max_q, num_q_heads, head_size)
    return attn.index_select(0, part.padded_rows)
