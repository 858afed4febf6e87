"""Per-step metadata of the MLA backend: the decode rows first, then the prefill rows.

vLLM's MLA layer runs the first `num_decode_tokens` tokens through the latent
(absorbed) decode and the rest through prefill over expanded keys and values; the
builder's `reorder_batch_threshold` (1, or 1 + k with speculative decoding) makes vLLM
put requests of at most that many tokens first. A speculative decode's 1 + k tokens go to
the latent decode as one row each (attention_plan.token_row_decode), each row's length
ending at its own token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import attrs
import torch
from vllm.v1.attention.backend import (
    AttentionCGSupport,
    AttentionMetadata,
    AttentionMetadataBuilder,
    CommonAttentionMetadata,
)
from vllm.v1.attention.backends.utils import split_decodes_and_prefills

from adapters.container import container
from adapters.torch.attention_plan import token_row_decode
from adapters.vllm.attention.metadata import (
    STAGED_PER_SEQ,
    StepArena,
    host_lens_exact,
    staged_on_host,
    staging_size,
    step_plan,
)
from ports.mla import MlaOps
from ports.ops import AttentionPart, AttentionPlan, AttentionPlanNeeds


@dataclass
class MlaMetadata(AttentionMetadata):
    """The fields vLLM's MLAAttention.forward_impl reads, and the step's plan."""

    num_actual_tokens: int
    num_decodes: int
    num_decode_tokens: int
    num_prefills: int
    slot_mapping: torch.Tensor
    plan: AttentionPlan
    # The MLA ops port the builder was handed (what the step's launches take on the host).
    ops: MlaOps = field(repr=False, compare=False)
    # Some prefill sequence attends to tokens cached before this step (chunked prefill,
    # prefix hits): its context is gathered from the cache, not only this step's rows.
    prefill_has_context: bool = False

    def graph_host_arguments(self) -> list[dict[str, Any]]:
        """The host-side arguments of this step's latent decode launches, in launch order,
        for the update of a FULL graph's replay: the MLA ops port's for the plan."""
        return self.ops.graph_host_arguments(self.plan)

    @property
    def decode(self) -> AttentionPart | None:
        return self.plan.decode

    @property
    def prefill(self) -> AttentionPart | None:
        return self.plan.prefill


class MlaMetadataBuilder(AttentionMetadataBuilder[MlaMetadata]):
    """The step's AttentionPlan, whose decode and prefill parts are vLLM's split: the
    leading decode requests (reordered first), then the rest.

    Full graphs of uniform decode steps (UNIFORM_BATCH: one token a request, or 1 + k
    with speculative decoding), as the paged backend: vLLM's batch tensors are
    persistent already and the plan's derived indices go into this builder's staging
    buffer, so a captured step reads the same memory each step. The latent-cache write
    sends vLLM's padding slots (-1) to its null block on the device
    (NpuMlaOps.write_latent_cache); a padding sequence of a batch padded to a captured
    size attends to nothing (length 0). A speculative 1 + k decode goes to the latent
    decode as a row per token (token_row_decode), its indices in a second staging buffer
    and its rows' block table in a persistent one. The latent decode's host-side lengths
    are refreshed at each replay through the graph update API (NpuGraphWrapper,
    MlaMetadata.graph_host_arguments).
    """

    _cudagraph_support = AttentionCGSupport.UNIFORM_BATCH
    reorder_batch_threshold = 1

    def __init__(  # type: ignore[no-untyped-def]
        self, kv_cache_spec, layer_names, vllm_config, device, ops=None
    ):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        # vLLM constructs the builder with this fixed signature: the device's MLA ops port
        # is resolved here unless given, and handed to each step's metadata.
        self.ops: MlaOps = ops if ops is not None else container().mla_ops()
        self.needs: AttentionPlanNeeds = self.ops.plan_needs
        self._host_lens_exact = host_lens_exact(vllm_config)
        # With speculative decoding, requests of up to 1 + k tokens are decodes (verified
        # in the latent decode, a row per token) rather than prefills over expanded K/V.
        self._init_reorder_batch_threshold(1, supports_spec_as_decode=True)
        self._staging: torch.Tensor | None = None
        # The runner's staging arena (use_arena) and the staging's host twin in it.
        self._arena: StepArena | None = None
        self._staging_host: torch.Tensor | None = None
        self.host_padding_slots = False  # vLLM's slots, -1 padding and all
        # Speculative decoding: the token rows' staging and block table (made at the first
        # build, which knows the table's width), for at most max_num_seqs * (1 + k) rows.
        self._row_staging: torch.Tensor | None = None
        self._row_table: torch.Tensor | None = None
        self._max_rows = 0
        if torch.device(device).type != "cpu":  # the host captures no graphs
            seqs = vllm_config.scheduler_config.max_num_seqs
            i64 = {"dtype": torch.int64, "device": device}
            self._staging = torch.zeros(staging_size(vllm_config), **i64)
            spec = vllm_config.speculative_config
            if spec is not None and spec.num_speculative_tokens:
                self._max_rows = seqs * (1 + int(spec.num_speculative_tokens))
                # The rows plan stages the batch's offsets and lengths too (2 more a row).
                self._row_staging = torch.zeros((STAGED_PER_SEQ + 2) * self._max_rows + 2, **i64)

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> MlaMetadata:
        cm = common_attn_metadata
        num_decodes, num_prefills, num_decode_tokens, _ = split_decodes_and_prefills(
            cm, decode_threshold=self.reorder_batch_threshold or 1
        )
        plan = step_plan(
            cm, self.needs, self._host_lens_exact, num_decodes=num_decodes, staging=self._staging,
            staging_host=staged_on_host(self._arena, self._staging_host),
        )
        if plan.decode is not None and not plan.decode.is_decode:
            rows = token_row_decode(plan, self.needs, self._row_staging, self._rows_table(cm))
            plan = attrs.evolve(plan, decode=rows)
        prefill = plan.prefill
        assert plan.slot_mapping is not None
        return MlaMetadata(
            num_actual_tokens=plan.num_actual_tokens,
            num_decodes=num_decodes,
            num_decode_tokens=num_decode_tokens,
            num_prefills=num_prefills,
            slot_mapping=plan.slot_mapping,
            plan=plan,
            ops=self.ops,
            prefill_has_context=prefill is not None
            and prefill.actual_seq_lens != prefill.actual_query_lens,
        )

    def use_arena(self, arena: StepArena, slots: torch.Tensor | None) -> None:
        """Keep the staged indices in the runner's arena (a step whose inputs the runner
        writes on the host sends them in its one copy); the slots stay vLLM's."""
        if self._staging is not None:
            self._arena = arena
            self._staging_host, self._staging = arena.twin(self._staging)

    def _rows_table(self, cm: CommonAttentionMetadata) -> torch.Tensor | None:
        """The persistent block table of the token rows (graph mode with speculation)."""
        if self._row_staging is None:
            return None
        table = cm.block_table_tensor
        if self._row_table is None or self._row_table.shape[1] != table.shape[1]:
            dtype = getattr(torch, self.needs.block_table_dtype.value)
            self._row_table = torch.zeros(
                self._max_rows, table.shape[1], dtype=dtype, device=table.device
            )
        return self._row_table
