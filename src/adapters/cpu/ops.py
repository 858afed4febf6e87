"""The ops port in plain torch on the host: the reference semantics every device matches.

Precision: norms, rotary and attention compute in float32 and return the input dtype;
silu_and_mul computes in the input dtype, as the models' own PyTorch code does.
"""

from __future__ import annotations

import torch

from ports.ops import Ops, PagedAttentionMeta

_F32 = torch.float32


class CpuOps(Ops):
    """Ops on host tensors. Stateless; one instance serves any number of callers."""

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """Normalise in float32, cast back to x's dtype, then scale by weight.

        The cast comes before the weight product, as in Hugging Face's and vLLM's
        PyTorch RMSNorm, so half-precision results match them bit for bit.
        """
        xf = x.to(_F32)
        variance = xf.pow(2).mean(dim=-1, keepdim=True)
        normed = (xf * torch.rsqrt(variance + eps)).to(x.dtype)
        return normed * weight.to(x.dtype)

    def add_rms_norm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The sum is taken in float32 and returned in x's dtype; the norm is of that sum."""
        summed = (x.to(_F32) + residual.to(_F32)).to(x.dtype)
        return self.rms_norm(summed, weight, eps), summed

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        return torch.nn.functional.silu(x[..., :d]) * x[..., d:]

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
        slots = slot_mapping.reshape(-1).long()
        n = slots.shape[0]
        valid = slots >= 0
        if not bool(valid.all()):
            idx = valid.nonzero().squeeze(1)
            slots = slots.index_select(0, idx)
            key = key[:n].index_select(0, idx)
            value = value[:n].index_select(0, idx)
        else:
            key = key[:n]
            value = value[:n]
        blocks = torch.div(slots, block_size, rounding_mode="floor")
        offsets = slots - blocks * block_size
        # Two-index index_put_ writes through views of any stride, so a cache that is a
        # slice of a larger [num_blocks, 2, ...] allocation is updated where it lives.
        key_cache.index_put_((blocks, offsets), key.to(key_cache.dtype))
        value_cache.index_put_((blocks, offsets), value.to(value_cache.dtype))

    def paged_attention(
        self,
        query: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        meta: PagedAttentionMeta,
        scale: float,
        out: torch.Tensor,
    ) -> torch.Tensor:
        """Batched over sequences (no per-sequence Python loop); computes in float32.

        Sequences with one new token take a gather + batched-matmul path that shares
        each kv head across its query group without copying; the others take one
        masked scaled_dot_product_attention over a padded batch. Query rows past
        num_actual_tokens are left untouched in `out`.
        """
        qsl = meta.query_start_loc.long()
        seq_lens = meta.seq_lens.long()
        num_seqs = seq_lens.shape[0]
        n_tok = meta.num_actual_tokens
        if num_seqs == 0 or n_tok == 0:
            return out
        q_lens = qsl[1 : num_seqs + 1] - qsl[:num_seqs]
        block_table = meta.block_table[:num_seqs]
        query = query[:n_tok]

        if meta.max_query_len <= 1 and n_tok == num_seqs:
            result = _decode(query, key_cache, value_cache, block_table, seq_lens, scale)
            out[:n_tok] = result.to(out.dtype)
            return out

        is_decode = q_lens == 1
        n_decode = int(is_decode.sum())
        if n_decode == 0:
            result = _prefill(
                query, key_cache, value_cache, block_table, qsl[: num_seqs + 1], seq_lens,
                q_lens, meta.max_query_len, scale,
            )
            out[:n_tok] = result.to(out.dtype)
            return out

        # Mixed batch: decodes and prefills go their own ways, then meet in `out`.
        dec_seqs = is_decode.nonzero().squeeze(1)
        dec_tokens = qsl.index_select(0, dec_seqs)
        dec = _decode(
            query.index_select(0, dec_tokens), key_cache, value_cache,
            block_table.index_select(0, dec_seqs), seq_lens.index_select(0, dec_seqs), scale,
        )
        out.index_copy_(0, dec_tokens, dec.to(out.dtype))
        pre_seqs = (q_lens > 1).nonzero().squeeze(1)
        if pre_seqs.numel() > 0:
            pre_q_lens = q_lens.index_select(0, pre_seqs)
            starts = qsl.index_select(0, pre_seqs)
            pre_tokens = _token_index(starts, pre_q_lens)
            pre_qsl = torch.zeros(pre_seqs.numel() + 1, dtype=torch.long)
            torch.cumsum(pre_q_lens, 0, out=pre_qsl[1:])
            pre = _prefill(
                query.index_select(0, pre_tokens), key_cache, value_cache,
                block_table.index_select(0, pre_seqs), pre_qsl,
                seq_lens.index_select(0, pre_seqs), pre_q_lens, int(pre_q_lens.max()), scale,
            )
            out.index_copy_(0, pre_tokens, pre.to(out.dtype))
        return out


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
    result = heads.clone()
    result[..., :rotary_dim] = rotated.to(x.dtype)
    return result.reshape(shape)


def _token_index(starts: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """Flat token indices of the ranges [start, start + len), concatenated."""
    total = int(lens.sum())
    seq_of = torch.repeat_interleave(torch.arange(lens.shape[0]), lens, output_size=total)
    firsts = torch.cumsum(lens, 0) - lens
    return starts.index_select(0, seq_of) + torch.arange(total) - firsts.index_select(0, seq_of)


def _gather_context(
    cache: torch.Tensor, block_table: torch.Tensor, seq_lens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each sequence's cached rows as [B, L, Hk, D] in float32, and the [B, L] validity mask.

    Rows past a sequence's length are zeroed: stale or never-written cache memory
    (possibly NaN) must not leak into the result through a zero attention weight.
    """
    block_size = cache.shape[1]
    max_len = int(seq_lens.max())
    num_blocks = -(-max_len // block_size)
    blocks = block_table[:, :num_blocks].long()
    ctx = cache.index_select(0, blocks.reshape(-1))
    ctx = ctx.reshape(blocks.shape[0], num_blocks * block_size, *cache.shape[2:])
    valid = torch.arange(num_blocks * block_size).unsqueeze(0) < seq_lens.unsqueeze(1)
    ctx = torch.where(valid[:, :, None, None], ctx.to(_F32), 0.0)
    return ctx, valid


def _decode(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """One new token per sequence: query [B, Hq, D] -> [B, Hq, D] in float32."""
    num_seqs, num_q_heads, head_size = query.shape
    num_kv_heads = key_cache.shape[2]
    group = num_q_heads // num_kv_heads
    keys, valid = _gather_context(key_cache, block_table, seq_lens)
    values, _ = _gather_context(value_cache, block_table, seq_lens)
    # [B, Hk, G, D] @ [B, Hk, D, L]: each kv head serves its query group with no copy.
    q = query.to(_F32).reshape(num_seqs, num_kv_heads, group, head_size)
    scores = torch.matmul(q, keys.permute(0, 2, 3, 1)) * scale
    scores.masked_fill_(~valid[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    result = torch.matmul(probs, values.permute(0, 2, 1, 3))  # [B, Hk, G, D]
    return result.reshape(num_seqs, num_q_heads, head_size)


def _prefill(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    q_lens: torch.Tensor,
    max_query_len: int,
    scale: float,
) -> torch.Tensor:
    """Any query lengths: pad to [B, Hq, max_q, D], one masked SDPA, unpad. Float32."""
    n_tok, num_q_heads, head_size = query.shape
    num_seqs = seq_lens.shape[0]
    num_kv_heads = key_cache.shape[2]
    group = num_q_heads // num_kv_heads
    keys, valid = _gather_context(key_cache, block_table, seq_lens)
    values, _ = _gather_context(value_cache, block_table, seq_lens)
    ctx_len = keys.shape[1]

    seq_of = torch.repeat_interleave(torch.arange(num_seqs), q_lens, output_size=n_tok)
    row_of = torch.arange(n_tok) - query_start_loc.index_select(0, seq_of)
    flat_pos = seq_of * max_query_len + row_of
    q_pad = query.new_zeros((num_seqs * max_query_len, num_q_heads, head_size), dtype=_F32)
    q_pad.index_copy_(0, flat_pos, query.to(_F32))
    q_pad = q_pad.reshape(num_seqs, max_query_len, num_q_heads, head_size).transpose(1, 2)

    # Row i of a sequence sees positions <= seq_len - q_len + i, and never past seq_len,
    # so the padded rows stay finite (they are dropped below).
    last_visible = (seq_lens - q_lens).unsqueeze(1) + torch.arange(max_query_len).unsqueeze(0)
    mask = torch.arange(ctx_len)[None, None, :] <= last_visible[:, :, None]
    mask = (mask & valid[:, None, :]).unsqueeze(1)  # [B, 1, max_q, L]

    k = keys.transpose(1, 2)
    v = values.transpose(1, 2)
    if group > 1:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    attn = torch.nn.functional.scaled_dot_product_attention(
        q_pad, k, v, attn_mask=mask, scale=scale
    )  # [B, Hq, max_q, D]
    attn = attn.transpose(1, 2).reshape(num_seqs * max_query_len, num_q_heads, head_size)
    return attn.index_select(0, flat_pos)
