"""The ops port on torch_npu's fused operators, with the host adapter's semantics.

Every torch_npu call goes through `self._torch_npu`, the module handed in by the
composition root (or the emulator in tests); tests/unit/npu reads this file to check
each call against the torch_npu 2.14.0 schemas. Facts relied on are from the op
docs shipped in the wheel (torch_npu/_op_plugin_docs.py).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

from adapters.npu.vision import NpuVisionOps
from adapters.torch.mrope import mrope_cos_sin
from ascend_core.errors import ConfigError
from ascend_core.op_limits import block_size_error
from ports.ops import AttentionPart, AttentionPlan, Ops

# sparse_mode 3 is "rightDownCausal": query row i of a sequence with q new tokens and
# kv context sees keys 0 .. kv - q + i, which is exactly the ops port's rule for
# prefill, chunked prefill and prefix-cache hits. It takes a compressed 2048x2048
# mask, True above the diagonal (True = masked out).
RIGHT_DOWN_CAUSAL = 3
NO_MASK = 0
# sparse_mode 4 is "band", its origin at the right-down corner: row i sees keys
# kv - q + i - pre_tokens .. kv - q + i + next_tokens (a sliding window of W positions:
# pre_tokens W - 1, next_tokens 0), with the same compressed causal mask.
BAND = 4
COMPRESSED_MASK_SIZE = 2048
NO_LIMIT = 2147483647  # pre_tokens / next_tokens default


class NpuOps(Ops):
    """Ops on NPU tensors through torch_npu; `torch_npu` is the module, injected."""

    def __init__(self, torch_npu: ModuleType) -> None:
        self._torch_npu = torch_npu
        self._masks: dict[torch.device, torch.Tensor] = {}
        self._vision = NpuVisionOps(self._torch_npu)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        # gamma must have x's dtype; the second output is 1/rms, kept for backward.
        y, _ = self._torch_npu.npu_rms_norm(x, weight.to(x.dtype), epsilon=eps)
        return y

    def add_rms_norm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # Outputs are (y, 1/rms, x1 + x2): torch_npu's own graph patterns unpack them so.
        y, _, summed = self._torch_npu.npu_add_rms_norm(
            x, residual, weight.to(x.dtype), epsilon=eps
        )
        return y, summed

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        # swiglu(x) = silu(A) * B with A, B the halves of x along dim: A is the first.
        out: torch.Tensor = self._torch_npu.npu_swiglu(x, dim=-1)
        return out

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
        """npu_mrope in rope mode: query and key in one op, straight from vLLM's cache.

        The op (CANN's RopeWithSinCosCache) takes q [T, Hq*D], k [T, Hk*D] and the cache
        [max_pos, rotary_dim] whose rows are cos | sin, gathers the rows at `positions`,
        rotates the first rotary_dim channels of each head ("half": neox, "interleave":
        GPT-J) and passes the rest through. It needs rotary_dim a multiple of 32 for
        fp16/bf16 (16 for fp32); other widths go through npu_rotary_mul per tensor.
        """
        multiple = 16 if query.dtype == torch.float32 else 32
        if rotary_dim % multiple:
            return self._rotary_mul(
                positions, query, key, cos_sin_cache, head_size, rotary_dim, is_neox_style
            )
        q, k = self._torch_npu.npu_mrope(
            positions.reshape(-1),
            query.reshape(query.shape[0], -1),
            key.reshape(key.shape[0], -1),
            cos_sin_cache,
            head_size,
            rotary_mode="half" if is_neox_style else "interleave",
        )
        return q.reshape(query.shape), k.reshape(key.shape)

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
        """npu_mrope in mrope mode (chunked sections, neox, a width it takes); else the
        per-token cos/sin gathered in torch and npu_rotary_mul (adapters/npu/vision.py)."""
        if is_neox_style:
            q, k, done = self._vision.mrope(
                positions, query, key, cos_sin_cache, head_size, rotary_dim, mrope_section,
                interleaved,
            )
            if done:
                return q, k
        cos, sin = mrope_cos_sin(cos_sin_cache, positions, mrope_section, interleaved)
        return self._rotate_by(cos, sin, query, key, head_size, rotary_dim, is_neox_style)

    def encoder_attention(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        seq_lens: tuple[int, ...],
        scale: float,
    ) -> torch.Tensor:
        return self._vision.encoder_attention(query, key, value, seq_lens, scale)

    def _rotary_mul(
        self,
        positions: torch.Tensor,
        query: torch.Tensor,
        key: torch.Tensor,
        cos_sin_cache: torch.Tensor,
        head_size: int,
        rotary_dim: int,
        is_neox_style: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """npu_rotary_mul on [1, T, H, rotary_dim] (BSND) with cos/sin as [1, T, 1, rotary_dim].

        The op computes r1 * x + r2 * rot(x), rot(x) = cat(-x2, x1) in "half" mode
        (neox) and the pairwise (-x_odd, x_even) interleave in "interleave" mode
        (GPT-J); so r1/r2 are cos/sin spread over the full rotary width the same way.
        Channels past rotary_dim pass through.
        """
        cos_sin = cos_sin_cache.index_select(0, positions.reshape(-1).long())
        cos, sin = cos_sin.chunk(2, dim=-1)
        return self._rotate_by(cos, sin, query, key, head_size, rotary_dim, is_neox_style)

    def _rotate_by(
        self,
        cos: torch.Tensor,
        sin: torch.Tensor,
        query: torch.Tensor,
        key: torch.Tensor,
        head_size: int,
        rotary_dim: int,
        is_neox_style: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin [T, rotary_dim / 2] spread over the rotary width as the mode reads them."""
        if is_neox_style:
            mode = "half"
            r1, r2 = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
        else:
            mode = "interleave"
            r1, r2 = cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)
        tokens = cos.shape[0]
        r1 = r1.to(query.dtype).view(1, tokens, 1, rotary_dim)
        r2 = r2.to(query.dtype).view(1, tokens, 1, rotary_dim)
        return (
            self._rotate(query, r1, r2, mode, head_size, rotary_dim),
            self._rotate(key, r1, r2, mode, head_size, rotary_dim),
        )

    def _rotate(
        self,
        x: torch.Tensor,
        r1: torch.Tensor,
        r2: torch.Tensor,
        mode: str,
        head_size: int,
        rotary_dim: int,
    ) -> torch.Tensor:
        tokens = r1.shape[1]
        heads = x.view(tokens, -1, head_size)
        part = heads[..., :rotary_dim].contiguous().unsqueeze(0)
        rotated = self._torch_npu.npu_rotary_mul(part, r1, r2, rotary_mode=mode).squeeze(0)
        if rotary_dim < head_size:
            rotated = torch.cat((rotated, heads[..., rotary_dim:]), dim=-1)
        return rotated.reshape(x.shape)

    def write_kv_cache(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        """K and V in one launch: npu_scatter_pa_kv_cache (cache_mode "Norm": ND caches
        [blocks, block_size, H, D], key/value [T, H, D], one slot per row).

        The op takes contiguous tensors only; caches that are strided views go through
        npu_scatter_nd_update_ with (block, offset) index pairs, once for K and once for V.
        Slot values must be in range (neither op checks): the port's contract is that every
        slot given is one (the backend cuts vLLM's -1 padding at num_actual_tokens), so
        nothing is filtered and nothing is read back. Rows past len(slot_mapping) are
        padding and ignored.
        """
        slots = slot_mapping.reshape(-1)
        count = slots.shape[0]
        if count == 0:
            return
        key = key[:count].to(key_cache.dtype).contiguous()
        value = value[:count].to(value_cache.dtype).contiguous()
        if key_cache.is_contiguous() and value_cache.is_contiguous():
            self._torch_npu.npu_scatter_pa_kv_cache(
                key, value, key_cache, value_cache, slots, cache_mode="Norm"
            )
            return
        block_size = key_cache.shape[1]
        flat = slots.long()
        blocks = torch.div(flat, block_size, rounding_mode="floor")
        indices = torch.stack((blocks, flat - blocks * block_size), dim=1)
        self._torch_npu.npu_scatter_nd_update_(key_cache, indices, key)
        self._torch_npu.npu_scatter_nd_update_(value_cache, indices, value)

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
        """npu_fused_infer_attention_score, BSH layout, paged KV via block_table.

        The plan's decode part goes as one call with S = 1 (no mask; sparse_mode does not
        apply there); its prefill part as another, padded to its longest query, with
        sparse_mode 3 and the compressed causal mask: the op takes a padded [B, S, H*D]
        query and each sequence's lengths as host lists (the plan's actual_*_lens). The
        caches are viewed as [num_blocks, block_size, Hk*D], the only paged KV layout
        BSH accepts.

        A window: prefills in band mode (pre_tokens window - 1, next_tokens 0, a static
        per-layer host argument); decodes, where the op ignores pre_tokens and
        sparse_mode, with a [B, KV_S] mask (True: masked) of the positions before each
        sequence's window, made on the device from its lengths (so a captured graph
        recomputes it from the persistent plan). Sinks: this op has no sink input
        (npu_fused_infer_attention_score_v2's learnable_sink takes TND layouts only), so
        it returns its softmax LSE and each row is scaled by 1 / (1 + e^(sink - lse)) =
        sigmoid(lse - sink): sum_j e^s_j v_j / (e^sink + sum_j e^s_j), in float32.
        """
        num_tokens = plan.num_actual_tokens
        if num_tokens == 0 or not plan.parts:
            return out
        _, block_size, kv_heads, head_size = key_cache.shape
        q_heads = query.shape[1]
        # A uniform step's one part is the batch in order (a decode step, padded or not, or
        # a verify step): the query and the output as they are. Else the padded rows take
        # row num_tokens (the plan's gather): one zero row appended.
        in_order = len(plan.parts) == 1 and plan.parts[0].in_order
        if not in_order:
            packed = torch.cat((query[:num_tokens], query.new_zeros(1, q_heads, head_size)))
            packed = packed.reshape(num_tokens + 1, q_heads * head_size)
        key, value, doubled = _paged_views(key_cache, value_cache)
        for part in plan.parts:
            _check_block_size(block_size, part.is_decode)
            width = part.max_query_len
            batch = part.num_seqs
            if in_order:
                q = query[:num_tokens].reshape(batch, width, -1).contiguous()
            else:
                q = packed.index_select(0, part.gather).view(batch, width, -1)
            if part.is_decode:
                mask = None if window is None else _decode_window_mask(part, window, block_size)
                mode = NO_MASK
            else:
                mask = self._causal_mask(query.device)
                mode = RIGHT_DOWN_CAUSAL if window is None else BAND
            attn, lse = self._torch_npu.npu_fused_infer_attention_score(
                q,
                key,
                value,
                atten_mask=mask,
                actual_seq_lengths=list(part.actual_query_lens),
                actual_seq_lengths_kv=list(part.actual_seq_lens),
                block_table=part.block_table * 2 if doubled else part.block_table,
                num_heads=q_heads,
                scale=float(scale),
                pre_tokens=NO_LIMIT if window is None or part.is_decode else window - 1,
                next_tokens=NO_LIMIT if window is None or part.is_decode else 0,
                input_layout="BSH",
                num_key_value_heads=kv_heads,
                sparse_mode=mode,
                block_size=block_size,
                softmax_lse_flag=sinks is not None,
            )
            rows = attn.reshape(batch, width, q_heads, head_size)
            if sinks is not None:
                # lse [B, N, S, 1] -> [B, S, N, 1]; the sink's share taken off each row.
                keep = torch.sigmoid(lse.transpose(1, 2) - sinks.float().view(1, 1, -1, 1))
                rows = (rows.float() * keep).to(attn.dtype)
            rows = rows.reshape(batch * width, q_heads, head_size)
            if in_order:
                out[:num_tokens].copy_(rows)
                continue
            rows = rows.index_select(0, part.padded_rows)
            out.index_copy_(0, part.tokens, rows.to(out.dtype))
        return out

    def graph_host_arguments(self, plan: AttentionPlan) -> list[dict[str, Any]]:
        """The lengths lists of each npu_fused_infer_attention_score call paged_attention
        makes for `plan` (a part each): a captured graph replays the op with the lists it
        was captured with unless NPUGraph.update gives it these."""
        return [
            {
                "actual_seq_lengths": list(part.actual_query_lens),
                "actual_seq_lengths_kv": list(part.actual_seq_lens),
            }
            for part in plan.parts
        ]

    def _causal_mask(self, device: torch.device) -> torch.Tensor:
        mask = self._masks.get(device)
        if mask is None:
            size = COMPRESSED_MASK_SIZE
            mask = torch.ones(size, size, dtype=torch.bool, device=device).triu_(diagonal=1)
            self._masks[device] = mask
        return mask


def _decode_window_mask(part: AttentionPart, window: int, block_size: int) -> torch.Tensor:
    """[B, max_blocks * block_size] bool, True at the positions before each decode
    sequence's window (its last `window` positions stay visible). The op wants a paged
    decode mask at least as wide as the block table times the block size."""
    width = part.block_table.shape[1] * block_size
    positions = torch.arange(width, device=part.seq_lens.device)
    return positions.unsqueeze(0) < (part.seq_lens - window).unsqueeze(1)


def _paged_views(
    key_cache: torch.Tensor, value_cache: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Key and value as the op reads them, and whether the block table must be doubled.

    Hybrid models (attention sharing pages with mamba/GDN state) get a block-compact
    layout: K and V alternate per block, [blocks, 2, block_size, Hk*D], so neither plane
    is contiguous. Read as one run of 2*blocks-1 pages, K of block b is page 2b counted
    from K's start and V of block b page 2b counted from V's start: two contiguous views
    of the same memory, with the block table doubled, no copy.
    """
    if key_cache.is_contiguous() and value_cache.is_contiguous():
        return _paged_view(key_cache), _paged_view(value_cache), False
    blocks, size, heads, dim = key_cache.shape
    page = size * heads * dim
    interleaved = (
        key_cache.stride() == value_cache.stride() == (2 * page, heads * dim, dim, 1)
        and value_cache.untyped_storage().data_ptr() == key_cache.untyped_storage().data_ptr()
        and value_cache.storage_offset() - key_cache.storage_offset() == page
    )
    if not interleaved:
        return _paged_view(key_cache), _paged_view(value_cache), False  # raises with a hint
    shape, strides = (2 * blocks - 1, size, heads * dim), (page, heads * dim, 1)
    return key_cache.as_strided(shape, strides), value_cache.as_strided(shape, strides), True


def _paged_view(cache: torch.Tensor) -> torch.Tensor:
    """The cache as [num_blocks, block_size, Hk*D]; the op takes no other strides."""
    if not cache.is_contiguous():
        raise ConfigError(
            f"npu_fused_infer_attention_score needs each KV cache contiguous as "
            f"[num_blocks, block_size, Hk*D]; got shape {tuple(cache.shape)} with strides "
            f"{cache.stride()} (key and value interleaved in one allocation?).",
            "allocate the key and value caches as separate contiguous "
            "[num_blocks, block_size, Hk, D] tensors (e.g. one [2, num_blocks, ...] tensor)",
        )
    blocks, size, heads, dim = cache.shape
    return cache.view(blocks, size, heads * dim)


def _check_block_size(block_size: int, decode_only: bool) -> None:
    # The plan refuses these sizes first (ascend_core.op_limits); this guards direct use.
    why = block_size_error(block_size, decode_only)
    if why:
        raise ConfigError(
            f"KV cache block_size {block_size} is not accepted by "
            f"npu_fused_infer_attention_score with a paged cache ({why}).",
            "serve with --block-size 128 (the plugin's default)",
        )
