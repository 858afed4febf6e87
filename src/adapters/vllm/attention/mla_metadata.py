"""Per-step metadata of the MLA backend: the decode rows first, then the prefill rows.

vLLM's MLA layer runs the first `num_decode_tokens` tokens through the latent
(absorbed) decode and the rest through prefill over expanded keys and values; the
builder's `reorder_batch_threshold = 1` makes vLLM put one-token requests first.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from vllm.v1.attention.backend import (
    AttentionCGSupport,
    AttentionMetadata,
    AttentionMetadataBuilder,
    CommonAttentionMetadata,
)
from vllm.v1.attention.backends.utils import split_decodes_and_prefills


@dataclass
class MlaRequests:
    """One part of the batch: each request's cache blocks and lengths."""

    block_table: torch.Tensor  # [B, max_blocks]
    seq_lens: torch.Tensor  # [B] context length counting this step's tokens (host)
    query_lens: torch.Tensor  # [B] this step's tokens (host)
    has_context: bool  # some request attends to tokens cached before this step


@dataclass
class MlaMetadata(AttentionMetadata):
    """The fields vLLM's MLAAttention.forward_impl reads, and ours."""

    num_actual_tokens: int
    num_decodes: int
    num_decode_tokens: int
    num_prefills: int
    slot_mapping: torch.Tensor
    decode: MlaRequests | None = None
    prefill: MlaRequests | None = None


class MlaMetadataBuilder(AttentionMetadataBuilder[MlaMetadata]):
    """Splits vLLM's CommonAttentionMetadata into its decode and prefill requests."""

    _cudagraph_support = AttentionCGSupport.NEVER
    reorder_batch_threshold = 1

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):  # type: ignore[no-untyped-def]
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        # The runner's host copy of the lengths is exact unless speculative tokens may be
        # rejected (it is an upper bound then); otherwise the lengths are read back once.
        self._host_lens_exact = vllm_config.speculative_config is None

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> MlaMetadata:
        cm = common_attn_metadata
        num_decodes, num_prefills, num_decode_tokens, _ = split_decodes_and_prefills(
            cm, decode_threshold=1
        )
        num_reqs = num_decodes + num_prefills
        qsl = cm.query_start_loc_cpu[: num_reqs + 1]
        query_lens = qsl[1:] - qsl[:-1]
        # Host lengths, once per step for every layer (the ops take lengths on the host).
        upper = cm.seq_lens_cpu_upper_bound if self._host_lens_exact else None
        seq_lens = (upper if upper is not None else cm.seq_lens.cpu())[:num_reqs]

        def part(start: int, stop: int) -> MlaRequests:
            q = query_lens[start:stop]
            s = seq_lens[start:stop]
            return MlaRequests(
                block_table=cm.block_table_tensor[start:stop],
                seq_lens=s,
                query_lens=q,
                has_context=bool((s > q).any()),
            )

        n = cm.num_actual_tokens
        return MlaMetadata(
            num_actual_tokens=n,
            num_decodes=num_decodes,
            num_decode_tokens=num_decode_tokens,
            num_prefills=num_prefills,
            slot_mapping=cm.slot_mapping[:n],
            decode=part(0, num_decodes) if num_decodes else None,
            prefill=part(num_decodes, num_reqs) if num_prefills else None,
        )
