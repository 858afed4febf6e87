"""Per-step attention metadata: the step's AttentionPlan, built once for every layer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from vllm.v1.attention.backend import (
    AttentionCGSupport,
    AttentionMetadata,
    AttentionMetadataBuilder,
    CommonAttentionMetadata,
)

from adapters.attention_plan import build_attention_plan
from adapters.container import container
from ports.ops import AttentionPlan, AttentionPlanNeeds

if TYPE_CHECKING:
    from vllm.config import VllmConfig


@dataclass
class PagedMetadata(AttentionMetadata):
    """What every layer's attention call of one step shares."""

    paged: AttentionPlan
    slot_mapping: torch.Tensor  # [num_actual_tokens] flat cache slots


def host_lens_exact(vllm_config: VllmConfig) -> bool:
    """Whether the runner's CPU sequence lengths are exact every step: vLLM makes them
    optimistic (every draft accepted) only for speculative decoding under async
    scheduling; n-gram runs without it, so its 1 + k-token decodes have exact lengths."""
    return vllm_config.speculative_config is None or not (
        vllm_config.scheduler_config.async_scheduling
    )


def host_seq_lens(cm: CommonAttentionMetadata, exact: bool) -> torch.Tensor:
    """The step's sequence lengths on the host: the runner's CPU copy where it is exact
    (it is an upper bound when speculative tokens may be rejected), else one read back."""
    upper = cm.seq_lens_cpu_upper_bound if exact else None
    return (upper if upper is not None else cm.seq_lens.cpu())[: cm.num_reqs]


def step_plan(
    cm: CommonAttentionMetadata,
    needs: AttentionPlanNeeds,
    host_lens_exact: bool,
    num_decodes: int | None = None,
) -> AttentionPlan:
    """The step's attention plan from vLLM's common metadata: the batch layout from the
    runner's CPU copies, the device tensors shared (not copied), once for every layer."""
    num_reqs = cm.num_reqs
    return build_attention_plan(
        cm.query_start_loc_cpu[: num_reqs + 1],
        host_seq_lens(cm, host_lens_exact),
        cm.block_table_tensor[:num_reqs],
        cm.num_actual_tokens,
        needs=needs,
        slot_mapping=cm.slot_mapping,
        on_device=(cm.query_start_loc[: num_reqs + 1], cm.seq_lens[:num_reqs]),
        num_decodes=num_decodes,
    )


class PagedMetadataBuilder(AttentionMetadataBuilder[PagedMetadata]):
    """Builds the step's AttentionPlan from vLLM's CommonAttentionMetadata.

    The plan's indices come from the runner's CPU copies (query_start_loc_cpu, the host
    sequence lengths) through array ops; vLLM's device tensors (query_start_loc, seq_lens,
    block_table_tensor, slot_mapping) are shared, not copied.
    """

    _cudagraph_support = AttentionCGSupport.NEVER

    def __init__(  # type: ignore[no-untyped-def]
        self, kv_cache_spec, layer_names, vllm_config, device, needs=None
    ):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        # vLLM constructs the builder with this fixed signature: what the device's ops read
        # from the plan is looked up once here unless given.
        self.needs: AttentionPlanNeeds = needs or container().ops().plan_needs
        self._host_lens_exact = host_lens_exact(vllm_config)

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> PagedMetadata:
        plan = step_plan(common_attn_metadata, self.needs, self._host_lens_exact)
        assert plan.slot_mapping is not None
        return PagedMetadata(paged=plan, slot_mapping=plan.slot_mapping)
