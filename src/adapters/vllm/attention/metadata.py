"""Per-step attention metadata: the step's AttentionPlan, built once for every layer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch
from vllm.v1.attention.backend import (
    AttentionCGSupport,
    AttentionMetadata,
    AttentionMetadataBuilder,
    CommonAttentionMetadata,
)

from adapters.container import container
from adapters.torch.attention_plan import build_attention_plan
from ports.ops import AttentionPlan, AttentionPlanNeeds, Ops

if TYPE_CHECKING:
    from vllm.config import VllmConfig


@runtime_checkable
class GraphUpdatableMetadata(Protocol):
    """A step's attention metadata that says what its launches inside a FULL graph take
    on the host (the graph update at each replay, NpuGraphWrapper)."""

    def graph_host_arguments(self) -> list[dict[str, Any]]: ...


def not_updatable(metadata: object) -> RuntimeError:
    """The refusal of a FULL graph holding attention it cannot update, naming the fix."""
    return RuntimeError(
        f"a FULL NPU graph holds attention of {type(metadata).__name__}, whose "
        "host-side arguments it cannot update; serve this model with "
        "-cc.cudagraph_mode=PIECEWISE"
    )


@dataclass
class PagedMetadata(AttentionMetadata):
    """What every layer's attention call of one step shares."""

    plan: AttentionPlan
    slot_mapping: torch.Tensor  # [num_actual_tokens] flat cache slots
    # The ops port the builder was handed (what the step's launches take on the host).
    ops: Ops = field(repr=False, compare=False)

    def graph_host_arguments(self) -> list[dict[str, Any]]:
        """The host-side arguments of this step's fused attention launches, in launch
        order, for the update of a FULL graph's replay: the ops port's for the plan."""
        return self.ops.graph_host_arguments(self.plan)


def host_lens_exact(vllm_config: VllmConfig) -> bool:
    """Whether the runner's CPU sequence lengths are exact every step. vLLM makes them
    optimistic (every draft accepted) for speculative decoding under async scheduling,
    and a draft model's own passes (eagle, eagle3, mtp, draft_model: vLLM's padded draft
    batch) lower only the device lengths by the rejected drafts, so their host copy is an
    upper bound even without it. n-gram runs without async scheduling and without a draft
    forward, so its 1 + k-token decodes have exact host lengths."""
    spec = vllm_config.speculative_config
    if spec is None:
        return True
    drafts_on_device = spec.use_eagle() or spec.uses_draft_model()
    return not (vllm_config.scheduler_config.async_scheduling or drafts_on_device)


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
    staging: torch.Tensor | None = None,
    slot_mapping: torch.Tensor | None = None,
    staging_host: torch.Tensor | None = None,
) -> AttentionPlan:
    """The step's attention plan from vLLM's common metadata: the batch layout from the
    runner's CPU copies, the device tensors shared (not copied), once for every layer.
    `staging` and `slot_mapping` (graph mode): the persistent buffer the derived indices
    are written into, and the slots to use instead of vLLM's; `staging_host`: its pinned
    twin in the runner's staging arena, on a step the arena sends in one copy."""
    num_reqs = cm.num_reqs
    return build_attention_plan(
        cm.query_start_loc_cpu[: num_reqs + 1],
        host_seq_lens(cm, host_lens_exact),
        cm.block_table_tensor[:num_reqs],
        cm.num_actual_tokens,
        needs=needs,
        slot_mapping=cm.slot_mapping if slot_mapping is None else slot_mapping,
        on_device=(cm.query_start_loc[: num_reqs + 1], cm.seq_lens[:num_reqs]),
        num_decodes=num_decodes,
        staging=staging,
        staging_host=staging_host,
    )


@runtime_checkable
class StepArena(Protocol):
    """The runner's staging arena as a builder sees it (adapters/vllm/worker/
    staging_arena.py): `deferred` while this step's inputs are written on the host and
    sent in one copy before the model runs; `twin` gives a persistent device buffer's
    (host, device) slices in the arena."""

    deferred: bool

    def twin(self, device_tensor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


def staged_on_host(arena: StepArena | None, host_twin: torch.Tensor | None) -> torch.Tensor | None:
    """The host twin to write this step's staged indices into, or None (copy them)."""
    return host_twin if arena is not None and arena.deferred else None


# Persistent index buffer per sequence the runner may hold: a uniform decode plan stages
# seven [B] tensors and one [B + 1] (the token rows two more).
STAGED_PER_SEQ = 10


def staging_size(vllm_config: VllmConfig) -> int:
    """The staging buffer's int64 elements: STAGED_PER_SEQ per token of the widest
    uniform decode step (max_num_seqs requests of 1 + k tokens with speculative decoding,
    whose token-sized indices outnumber the per-sequence ones)."""
    spec = vllm_config.speculative_config
    width = 1 + int(spec.num_speculative_tokens or 0) if spec is not None else 1
    return STAGED_PER_SEQ * vllm_config.scheduler_config.max_num_seqs * width + 1


class PagedMetadataBuilder(AttentionMetadataBuilder[PagedMetadata]):
    """Builds the step's AttentionPlan from vLLM's CommonAttentionMetadata.

    The plan's indices come from the runner's CPU copies (query_start_loc_cpu, the host
    sequence lengths) through array ops; vLLM's device tensors (query_start_loc, seq_lens,
    block_table_tensor) are shared, not copied.

    Full graphs of uniform decode steps (UNIFORM_BATCH: one token a request, or 1 + k
    with speculative decoding, each request's verify one causal query of 1 + k rows):
    what a captured step reads lives in persistent device buffers written in place each
    step. vLLM's own
    tensors are persistent already; the plan's derived indices go into this builder's
    staging buffer, and the slot mapping into its slot buffer with vLLM's padding (-1)
    replaced by slots of the null block (block 0, which vLLM never gives a request): the
    padded tokens of a batch padded to a captured size write there, nowhere that is read.
    The attention op's host-side lengths are refreshed at each replay through the graph
    update API (NpuGraphWrapper, PagedMetadata.graph_host_arguments).
    """

    _cudagraph_support = AttentionCGSupport.UNIFORM_BATCH

    def __init__(  # type: ignore[no-untyped-def]
        self, kv_cache_spec, layer_names, vllm_config, device, ops=None
    ):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        # vLLM constructs the builder with this fixed signature: the device's ops port is
        # resolved here unless given, and handed to each step's metadata.
        self.ops: Ops = ops if ops is not None else container().ops()
        self.needs: AttentionPlanNeeds = self.ops.plan_needs
        self._host_lens_exact = host_lens_exact(vllm_config)
        self._staging: torch.Tensor | None = None
        self._slots: torch.Tensor | None = None
        self._padding_slots: torch.Tensor | None = None
        # The runner's staging arena (use_arena): the staging's host twin, and whether
        # the slots are the runner's own, written with their padding on the host.
        self._arena: StepArena | None = None
        self._staging_host: torch.Tensor | None = None
        self.host_padding_slots = False
        if torch.device(device).type != "cpu":  # the host captures no graphs
            scheduler = vllm_config.scheduler_config
            tokens = max(scheduler.max_num_batched_tokens, scheduler.max_num_seqs)
            i64 = {"dtype": torch.int64, "device": device}
            self._staging = torch.zeros(staging_size(vllm_config), **i64)
            self._slots = torch.zeros(tokens, **i64)
            # Padding token i writes to slot i of the null block: distinct for up to
            # block_size padded tokens (vLLM's capture sizes step by at most 16 there).
            self._padding_slots = torch.arange(tokens, **i64) % kv_cache_spec.block_size

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> PagedMetadata:
        cm = common_attn_metadata
        plan = step_plan(
            cm,
            self.needs,
            self._host_lens_exact,
            staging=self._staging,
            slot_mapping=self._writable_slots(cm.slot_mapping[: cm.num_actual_tokens]),
            staging_host=staged_on_host(self._arena, self._staging_host),
        )
        assert plan.slot_mapping is not None
        return PagedMetadata(plan=plan, slot_mapping=plan.slot_mapping, ops=self.ops)

    def use_arena(self, arena: StepArena, slots: torch.Tensor | None) -> None:
        """Keep the staged indices in the runner's arena, and take the runner's slot
        buffer (an arena slice, `slots`) as this builder's: a step whose inputs the
        runner writes on the host then has its padding slots written there too (the null
        block's: host_padding_slots), so no maximum is launched; any other step sends
        vLLM's -1s to the null block in place, at the same address a graph captured."""
        if self._staging is None or self._slots is None:
            return
        self._arena = arena
        self._staging_host, self._staging = arena.twin(self._staging)
        if slots is not None and slots.shape[0] >= self._slots.shape[0]:
            self._slots = slots
            self.host_padding_slots = True

    def _writable_slots(self, slots: torch.Tensor) -> torch.Tensor:
        """vLLM's slots with its padding (-1) sent to the null block, in the persistent
        slot buffer: one elementwise maximum on the device, no read back (a request's slot
        is at least block_size, as vLLM gives no request block 0, and padding token i's
        is i % block_size; on the host write_kv_cache skips -1)."""
        if self._slots is None or self._padding_slots is None:
            return slots
        count = slots.shape[0]
        if (
            self.host_padding_slots
            and self._arena is not None
            and self._arena.deferred
            and slots.data_ptr() == self._slots.data_ptr()
        ):  # the runner wrote them with the null block's padding, on the host
            return slots
        if count > self._slots.shape[0]:  # beyond the runner's token budget: not captured
            padding = torch.arange(count, device=slots.device) % self.kv_cache_spec.block_size
            return torch.maximum(slots, padding)
        out = self._slots[:count]
        torch.maximum(slots, self._padding_slots[:count], out=out)
        return out
