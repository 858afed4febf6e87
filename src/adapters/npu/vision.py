"""M-RoPE and a vision tower's attention on torch_npu's operators (NpuOps delegates here).

Facts from the 2.14.0 wheel's op docs (torch_npu/_op_plugin_docs.py):
- npu_mrope in mrope mode takes positions (3, numTokens) and mrope_section with
  section[0] + section[1] + section[2] == rotary_dim / 2; cache_mode 'default' splices the
  three sections in order (Qwen2/2.5-VL's chunked layout). The docs do not give the layout
  of cache_mode 'interleave', so Qwen3-VL's interleaved sections are gathered here in
  torch (adapters/torch/mrope.py) and rotated by npu_rotary_mul.
- npu_fused_infer_attention_score's TND layout without a cache (the encoder layout) is
  limited to Q_D = K_D = 192 and N in 8..128 with equal query and key heads (an MLA
  prefill's shape): a ViT's heads (Qwen2.5-VL 80, Qwen3-VL 64 or 72) are refused there. So
  the tower's attention goes as BSND without a cache, every image (or window) one batch
  padded to the longest, its true lengths in actual_seq_lengths(_kv), sparse_mode 0 and
  no mask (the whole sequence seen). The reference plugin calls the ATB op
  _npu_flash_attention_unpad instead, whose semantics the wheel does not document.
"""

from __future__ import annotations

from types import ModuleType

import torch

from ascend_core.errors import ConfigError

_HALF = (torch.float16, torch.bfloat16)


class NpuVisionOps:
    """The vision roles of the ops port; `torch_npu` is the injected module."""

    def __init__(self, torch_npu: ModuleType) -> None:
        self._torch_npu = torch_npu
        # The padded rows of the last sequence lengths seen: every layer of a tower's pass
        # gives the same lengths, so the index is built and copied to the device once.
        self._rows_of: tuple[tuple[int, ...], torch.device, torch.Tensor] | None = None

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
    ) -> tuple[torch.Tensor, torch.Tensor, bool]:
        """(query, key, done): npu_mrope in mrope mode where it applies (chunked sections, a
        rotary width the op takes); done False: the caller rotates by cos/sin itself."""
        multiple = 16 if query.dtype == torch.float32 else 32
        if interleaved or rotary_dim % multiple or cos_sin_cache.shape[1] != rotary_dim:
            return query, key, False
        q, k = self._torch_npu.npu_mrope(
            positions,
            query.reshape(query.shape[0], -1),
            key.reshape(key.shape[0], -1),
            cos_sin_cache,
            head_size,
            mrope_section=list(mrope_section),
            rotary_mode="half",
        )
        return q.reshape(query.shape), k.reshape(key.shape), True

    def encoder_attention(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        seq_lens: tuple[int, ...],
        scale: float,
    ) -> torch.Tensor:
        """One npu_fused_infer_attention_score call, BSND without a cache: the sequences
        padded to the longest (equal lengths: the tokens as they are, no copy)."""
        if query.dtype not in _HALF:
            raise ConfigError(
                f"the vision tower's attention on the NPU takes float16 or bfloat16 "
                f"(npu_fused_infer_attention_score has no {query.dtype} query).",
                "serve the model with --dtype bfloat16",
            )
        lens = tuple(n for n in seq_lens if n > 0)
        if sum(lens) != query.shape[0]:
            raise ValueError(
                f"encoder_attention: the sequence lengths sum to {sum(lens)}, the query has "
                f"{query.shape[0]} tokens; pass one length per image (or window), in order."
            )
        batch, longest = len(lens), max(lens)
        heads, kv_heads, dim = query.shape[1], key.shape[1], query.shape[2]
        uniform = all(n == longest for n in lens)
        if uniform:
            q, k, v = (t.contiguous().view(batch, longest, -1, dim) for t in (query, key, value))
        else:
            rows = self._padded_rows(lens, longest, query.device)
            q, k, v = (_scatter(t, rows, batch * longest).view(batch, longest, -1, dim)
                       for t in (query, key, value))
        result: tuple[torch.Tensor, torch.Tensor] = self._torch_npu.npu_fused_infer_attention_score(
            q,
            k,
            v,
            actual_seq_lengths=list(lens),
            actual_seq_lengths_kv=list(lens),
            num_heads=heads,
            num_key_value_heads=kv_heads,
            input_layout="BSND",
            scale=scale,
            sparse_mode=0,
        )
        out = result[0].view(batch * longest, heads, dim)
        return out if uniform else out.index_select(0, rows)

    def _padded_rows(
        self, lens: tuple[int, ...], longest: int, device: torch.device
    ) -> torch.Tensor:
        """[T] int64 on the device: token t of sequence b at row b * longest + t."""
        if self._rows_of is not None and self._rows_of[:2] == (lens, device):
            return self._rows_of[2]
        host = torch.cat([torch.arange(n) + b * longest for b, n in enumerate(lens)])
        rows = host.to(device)
        self._rows_of = (lens, device, rows)
        return rows


def _scatter(x: torch.Tensor, rows: torch.Tensor, total: int) -> torch.Tensor:
    """x's tokens at `rows` of a zeroed [total, ...] (padding rows the op never reads)."""
    padded = x.new_zeros((total, *x.shape[1:]))
    return padded.index_copy_(0, rows, x.contiguous())
