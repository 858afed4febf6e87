"""Per-step attention metadata, built once per step from vLLM's common metadata (no loops)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from vllm.v1.attention.backend import (
    AttentionCGSupport,
    AttentionMetadata,
    AttentionMetadataBuilder,
    CommonAttentionMetadata,
)

from adapters.container import container
from ports.ops import PagedAttentionMeta


@dataclass
class PagedMetadata(AttentionMetadata):
    """What every layer's attention call of one step shares."""

    paged: PagedAttentionMeta
    slot_mapping: torch.Tensor  # [num_actual_tokens] flat cache slots


class PagedMetadataBuilder(AttentionMetadataBuilder[PagedMetadata]):
    """Repackages vLLM's CommonAttentionMetadata; the tensors are shared, not copied.

    The batch layout's host-side values come from the runner's CPU copies
    (query_start_loc_cpu, seq_lens_cpu_upper_bound, exact without speculative decoding),
    and the device's ops prepare the step's index tensors here, once for every layer.
    """

    _cudagraph_support = AttentionCGSupport.NEVER

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):  # type: ignore[no-untyped-def]
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.ops = container().ops()

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> PagedMetadata:
        cm = common_attn_metadata
        num_reqs = cm.num_reqs
        n = cm.num_actual_tokens
        seq_lens_cpu = cm.seq_lens_cpu_upper_bound
        paged = PagedAttentionMeta(
            query_start_loc=cm.query_start_loc[: num_reqs + 1],
            seq_lens=cm.seq_lens[:num_reqs],
            block_table=cm.block_table_tensor[:num_reqs],
            max_query_len=cm.max_query_len,
            max_seq_len=cm.max_seq_len,
            num_actual_tokens=n,
            query_start_loc_host=tuple(cm.query_start_loc_cpu[: num_reqs + 1].tolist()),
            seq_lens_host=None if seq_lens_cpu is None else tuple(seq_lens_cpu[:num_reqs].tolist()),
        )
        return PagedMetadata(
            paged=self.ops.prepare_attention(paged), slot_mapping=cm.slot_mapping[:n]
        )
