"""A decode step's inputs made on the host: the NPU runner's way for uniform decode steps.

vLLM's `_prepare_inputs` derives positions, sequence lengths and the slot mapping on the
device from host copies of their parts: at one token a request that is some fifteen
small ops, each a host call and a launch on an NPU, around a step whose model is one
graph replay. Every one of those values is known on the host (the runner keeps each
request's computed tokens and block table there), so for a step where every request has
one token the NPU runner writes them there and copies them over: positions, lengths and
slots, the padding mask only when the padding changes, the sampled rows taken as a view
of the hidden states (they are its first rows). With the staging arena (bound once the
KV cache is made) those persistent buffers, the block table and the attention plan's
staged indices are slices of one pinned host buffer and one device buffer, and the step
sends them all in one copy, just before the model runs (its padding rows and slots
written on the host too). Any other step (prefill,
mixed, speculative, M-RoPE, prompt embeddings, LoRA, hybrid or context-parallel models)
goes through vLLM's own code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from vllm.logger import init_logger
from vllm.utils.torch_utils import PIN_MEMORY
from vllm.v1.worker.block_table import SlotMappingMode
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

from adapters.vllm.attention.metadata import staging_size
from adapters.vllm.worker.sampled_tail import SamplingStage, sampled_tail_serves
from adapters.vllm.worker.staging_arena import ALIGN, StagingArena

if TYPE_CHECKING:
    from vllm.v1.core.sched.output import SchedulerOutput

logger = init_logger(__name__)

# The slot of a token that is padding (vLLM's value: nothing reads or writes there).
PAD_SLOT = -1
# The block a padding request's block-table row names (vLLM's NULL_BLOCK_ID).
NULL_BLOCK = 0
# At most this many metadata builders take their staging from the arena (one per kind of
# attention of the KV cache group; more are micro-batches').
ARENA_BUILDERS = 2


class HostDecodeInputsMixin(GPUModelRunner):
    """GPUModelRunner's step inputs, made on the host for uniform decode steps (mixed in
    before GPUModelRunner; its own state is made at first use)."""

    # (buffer address, unpadded, padded) the device padding mask was last written for:
    # vLLM writes is_padding only in _prepare_padding_mask (a runner buffer, outside the
    # sleep pools), so a step padded as the last one needs no fill.
    _padding_written: tuple[int, int, int] | None = None
    # The requests of this step whose slots were made on the host, until copied.
    _host_slots_pending: int | None = None
    _host_positions: torch.Tensor | None = None
    _host_decode_served: bool | None = None
    # The staging arena and this step's host twins in it (bound after the KV cache).
    _arena: StagingArena | None = None
    _arena_seq_lens: torch.Tensor | None = None
    # The null block's padding slots go in the host slots (a builder takes them as its
    # own); None: vLLM's -1.
    _arena_slot_block: int | None = None
    _arena_reqs_padded: int = 0
    # Each row's sampling parameters in the arena (a FULL graph's sampled tail reads
    # them), and whether this step wrote them for a batch that tail serves.
    _sampling_stage: SamplingStage | None = None
    _sampled_step: bool = False

    def _staging_arena_bytes(self, builders: int) -> int:
        """The bytes of the buffers a decode step sends, each slice aligned."""
        table = self.input_batch.block_table.block_tables[0]
        own = (self.positions, self.seq_lens, self.query_start_loc.cpu,
               self.discard_request_mask.cpu, table.block_table.cpu,
               table.slot_mapping.cpu)  # fmt: skip
        nbytes = sum(t.numel() * t.element_size() for t in own)
        nbytes += builders * 8 * staging_size(self.vllm_config)
        nbytes += SamplingStage.nbytes(self.max_num_reqs)
        return nbytes + ALIGN * (len(own) + builders + len(SamplingStage.FIELDS) + 1)

    def _bind_staging_arena(self) -> None:
        """Make the decode step's persistent buffers slices of the arena (before any
        graph is captured: the graphs read them there), or keep one copy each, saying
        why."""
        self._arena = None
        reason = self._arena_refusal()
        if reason:
            logger.info("NPU decode inputs: one copy each, not one staging copy: %s", reason)
            return
        builders = [b for g in self.attn_groups[0] for b in g.metadata_builders]
        # vLLM synchronizes its prepare_inputs_event before each step writes its inputs;
        # the arena's copy comes after vLLM records it, so the arena records it again
        # (staging_arena.py; None without async scheduling: each step reads back first).
        arena = StagingArena(
            self._staging_arena_bytes(len(builders)), self.device, PIN_MEMORY,
            getattr(self, "prepare_inputs_event", None),
        )  # fmt: skip
        arena.bind(self.query_start_loc)
        arena.bind(self.discard_request_mask)
        self._host_positions, self.positions = arena.twin(self.positions)
        self._arena_seq_lens, self.seq_lens = arena.twin(self.seq_lens)
        table = self.input_batch.block_table.block_tables[0]
        arena.bind(table.block_table)
        arena.bind(table.slot_mapping)
        for builder in builders:
            builder.use_arena(arena, table.slot_mapping.gpu)
        takes = {bool(getattr(b, "host_padding_slots", False)) for b in builders}
        if takes == {True}:
            self._arena_slot_block = builders[0].kv_cache_spec.block_size
        else:  # a builder reads vLLM's -1s: the host writes those, the others send them on
            for builder in builders:
                builder.host_padding_slots = False
        self._sampling_stage = SamplingStage(
            arena.take, self.max_num_reqs, self.input_batch.vocab_size,
            seed=self.model_config.seed or 0,
        )  # fmt: skip
        self._arena = arena
        logger.info(
            "NPU decode inputs: one staging copy of %d bytes a decode step (positions, "
            "lengths, offsets, discard mask, block table, slots, the attention plan, "
            "the rows' sampling parameters)",
            arena.used,
        )

    def _arena_refusal(self) -> str | None:
        """Why this runner's decode steps cannot send their inputs in one copy, or None."""
        if self.model_config.enable_sleep_mode:
            # Made with the KV cache, it would be allocated in the KV cache's sleep pool.
            return "sleep mode (the arena would sit in the KV cache's sleep pool)"
        if not self._host_decode_serves():
            return "the decode step's inputs are not made on the host for this model"
        if len(self.kv_cache_config.kv_cache_groups) != 1:
            return "more than one KV cache group"
        groups = self.attn_groups[0] if self.attn_groups else []
        builders = [b for g in groups for b in g.metadata_builders]
        if not builders or not all(hasattr(b, "use_arena") for b in builders):
            names = sorted({type(b).__name__ for b in builders})
            return f"attention metadata builders {names} keep their own staging"
        if len(builders) > ARENA_BUILDERS:
            return f"{len(builders)} metadata builders (micro-batches)"
        return None

    def _host_decode_serves(self) -> bool:
        """Whether this runner's uniform decode steps can take the host way at all: what
        vLLM's way does beyond positions, lengths and slots is none of this model's."""
        if self._host_decode_served is None:
            tables = self.input_batch.block_table.block_tables
            self._host_decode_served = not (
                self.speculative_config is not None
                or self.uses_mrope
                or self.enable_prompt_embeds
                or self.lora_config is not None
                or self.is_pooling_model
                or self.model_config.is_hybrid
                or self.model_config.is_encoder_decoder
                or self.dcp_world_size > 1
                or self.cache_config.kv_sharing_fast_prefill
                or any(t.slot_mapping_mode != SlotMappingMode.TOKEN_TO_KV_SLOT for t in tables)
            )
        return self._host_decode_served

    def _positions_staging(self) -> torch.Tensor:
        """Pinned host int64 the step's positions are written into (vLLM keeps them on the
        device only; the computed counts it has on the host are int32)."""
        if self._host_positions is None:
            self._host_positions = torch.zeros(
                self.max_num_reqs, dtype=torch.int64, pin_memory=PIN_MEMORY
            )
        return self._host_positions

    def _prepare_inputs(
        self, scheduler_output: SchedulerOutput, num_scheduled_tokens: np.ndarray
    ) -> tuple[Any, Any, int]:
        self._host_slots_pending = None
        self._sampled_step = False
        arena = self._arena
        if arena is not None:  # only a step made here sends the whole arena
            arena.deferred = False
        num_reqs = self.input_batch.num_reqs
        if not (
            scheduler_output.total_num_scheduled_tokens == num_reqs
            and not scheduler_output.scheduled_spec_decode_tokens
            and self._host_decode_serves()
        ):
            return super()._prepare_inputs(scheduler_output, num_scheduled_tokens)
        batch = self.input_batch
        if arena is None:
            batch.block_table.commit_block_table(num_reqs)
        else:  # the host block table is the arena's: sent with the step's one copy
            arena.deferred = True
        cu_num_tokens = self._get_cumsum_and_arange(num_scheduled_tokens, self.query_pos.np)
        computed = batch.num_computed_tokens_cpu[:num_reqs]  # each request's one position
        reqs = self.arange_np[:num_reqs]  # token i is request i's

        # The token ids the host has (vLLM's way; the ones sampled last step on the device
        # come in _prepare_input_ids).
        token_indices = torch.from_numpy(computed + reqs * batch.token_ids_cpu.shape[1])
        torch.index_select(
            batch.token_ids_cpu_tensor.flatten(), 0, token_indices,
            out=self.input_ids.cpu[:num_reqs],
        )  # fmt: skip

        self.query_start_loc.np[0] = 0
        self.query_start_loc.np[1 : num_reqs + 1] = cu_num_tokens
        self.query_start_loc.np[num_reqs + 1 :].fill(cu_num_tokens[-1])
        if arena is None:
            self.query_start_loc.copy_to_gpu()

        optimistic = self.optimistic_seq_lens_cpu
        torch.add(batch.num_computed_tokens_cpu_tensor[:num_reqs], 1, out=optimistic[:num_reqs])
        optimistic[num_reqs:].fill_(0)
        self._compute_prev_positions(num_reqs)
        num_tokens = np.fromiter(
            (self.requests[r].num_tokens for r in batch.req_ids), np.int64, num_reqs
        )
        # A request whose one token is not its last prompt token samples nothing.
        self.discard_request_mask.np[:num_reqs] = optimistic[:num_reqs].numpy() < num_tokens
        if arena is None:
            self.discard_request_mask.copy_to_gpu(num_reqs)
        # num_accepted_tokens stays all ones (vLLM's initial value): only speculative
        # decoding writes it. The device copies of the computed tokens, request indices,
        # query positions and scheduled counts feed only the device way of positions and
        # lengths (and speculative decoding, M-RoPE, hybrid models): their host halves are
        # kept, for whatever reads them.
        self.req_indices.np[:num_reqs] = reqs
        self.num_scheduled_tokens.np[:num_reqs] = num_scheduled_tokens

        positions = self._positions_staging()
        positions.numpy()[:num_reqs] = computed
        if arena is None:
            self.positions[:num_reqs].copy_(positions[:num_reqs], non_blocking=True)
            # The lengths are the optimistic ones, zero past the batch (pinned, as vLLM's).
            self.seq_lens.copy_(optimistic, non_blocking=True)
        else:
            assert self._arena_seq_lens is not None
            self._arena_seq_lens.copy_(optimistic)

        for table in batch.block_table.block_tables:
            # Block row i, at the request's position.
            blocks = table.block_table.np[reqs, computed // table.block_size]
            np.add(
                blocks.astype(np.int64) * table.block_size,
                computed % table.block_size,
                out=table.slot_mapping.np[:num_reqs],
            )
        self._host_slots_pending = num_reqs
        self._stage_sampling(num_reqs)

        self._prepare_input_ids(scheduler_output, num_reqs, num_reqs, cu_num_tokens)
        # Every token is its request's last: the sampled hidden states are the first
        # num_reqs rows, a view (vLLM only indexes the hidden states with this; the
        # fast-prefill path that reads its size is not served here).
        return slice(0, num_reqs), None, 1

    def _stage_sampling(self, num_reqs: int) -> None:
        """The rows' sampling parameters into the arena, for a batch that a FULL graph's
        sampled tail serves (sent with the step's one copy)."""
        stage = self._sampling_stage
        if stage is None or getattr(self.model, "sampled_tail", None) is None:
            return
        if sampled_tail_serves(self.input_batch.sampling_metadata):
            stage.write(self.input_batch, num_reqs)
            self._sampled_step = True

    def _get_slot_mappings(
        self,
        num_tokens_padded: int,
        num_reqs_padded: int,
        num_tokens_unpadded: int,
        ubatch_slices: Any = None,
    ) -> tuple[Any, Any]:
        pending, self._host_slots_pending = self._host_slots_pending, None
        if pending is None or pending != num_tokens_unpadded:  # not this step's: vLLM's
            return super()._get_slot_mappings(
                num_tokens_padded, num_reqs_padded, num_tokens_unpadded, ubatch_slices
            )
        tables = self.input_batch.block_table.block_tables
        arena = self._arena
        for table in tables:  # the host's slots and their padding, in one copy a group
            table.slot_mapping.np[pending:num_tokens_padded] = PAD_SLOT
            if arena is None:
                table.slot_mapping.copy_to_gpu(num_tokens_padded)
        if arena is not None and arena.deferred:
            # Sent with the arena: the padding requests' block-table rows name the null
            # block (vLLM fills them on the device too), and the padding tokens' slots are
            # the null block's when the builder takes these slots as its own.
            table = tables[0]
            table.block_table.np[pending:num_reqs_padded] = NULL_BLOCK
            if self._arena_slot_block is not None:
                table.slot_mapping.np[pending:num_tokens_padded] = (
                    np.arange(pending, num_tokens_padded) % self._arena_slot_block
                )
        if ubatch_slices is not None:  # micro-batches: vLLM slices (its fills find -1)
            return super()._get_slot_mappings(
                num_tokens_padded, num_reqs_padded, num_tokens_unpadded, ubatch_slices
            )
        by_group = {
            gid: table.slot_mapping.gpu[:num_tokens_padded] for gid, table in enumerate(tables)
        }
        by_layer = {
            name: by_group[gid]
            for gid, group in enumerate(self.kv_cache_config.kv_cache_groups)
            for name in group.layer_names
        }
        return by_group, by_layer

    def _prepare_padding_mask(
        self, num_tokens_unpadded: int, num_tokens_padded: int
    ) -> torch.Tensor:
        key = (self.is_padding.data_ptr(), num_tokens_unpadded, num_tokens_padded)
        if key == self._padding_written:
            return self.is_padding[:num_tokens_padded]
        mask = super()._prepare_padding_mask(num_tokens_unpadded, num_tokens_padded)
        self._padding_written = key
        return mask
