"""vLLM's Triton kernels as calls of our ports, for the host and the NPU (see
patches/torch_kernels): each takes the kernel's own argument names."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from ports.draft_inputs import DraftInputOps
    from ports.rejection import RejectionOps
    from ports.slot_mapping import SlotMapping


def slot_mapping_kernel(slots: SlotMapping) -> Callable[..., None]:
    """vLLM's ComputeSlotMappingKernel.kernel on the slot-mapping port."""

    def compute_slot_mapping(
        num_tokens: int,
        max_num_tokens: int,
        query_start_loc_ptr: torch.Tensor,
        positions_ptr: torch.Tensor,
        block_table_ptr: torch.Tensor,
        block_table_stride: int,
        slot_mapping_ptr: torch.Tensor,
        KV_CACHE_BLOCK_SIZE: int,
        TOTAL_CP_WORLD_SIZE: int = 1,
        TOTAL_CP_RANK: int = 0,
        CP_KV_CACHE_INTERLEAVE_SIZE: int = 1,
        PAD_ID: int = -1,
        BLOCK_SIZE: int = 1024,
    ) -> None:
        """The Triton kernel's contract: tokens of request r are query_start_loc[r] ..
        query_start_loc[r+1]; slots past the scheduled tokens up to max_num_tokens are
        PAD_ID. BLOCK_SIZE is the kernel's launch tile, of no meaning here."""
        if TOTAL_CP_WORLD_SIZE != 1:
            raise NotImplementedError("context parallelism is not supported on this device")
        slots.compute(
            num_tokens,
            max_num_tokens,
            query_start_loc_ptr,
            positions_ptr,
            block_table_ptr,
            block_table_stride,
            slot_mapping_ptr,
            KV_CACHE_BLOCK_SIZE,
            PAD_ID,
        )

    return compute_slot_mapping


# vLLM 0.33's EAGLE input kernels (v1/spec_decode/utils.py), used by every draft-model
# proposer (eagle, eagle3, mtp, draft_model), on the DraftInputOps port. The launch passes
# the kernel's arguments by name; the *_ptr tensors are whole tensors here, so strides,
# tile sizes (BLOCK_SIZE_*) and counts the tensors' shapes carry go unused.


def eagle_step_kernel(ops: DraftInputOps) -> Callable[..., None]:
    """eagle_step_slot_mapping_metadata_kernel on DraftInputOps.advance_one."""

    def eagle_step_slot_mapping_metadata_kernel(
        positions_ptr: torch.Tensor,
        block_table_ptr: torch.Tensor,
        block_table_stride: int,
        seq_lens_ptr: torch.Tensor,
        out_clamped_positions_ptr: torch.Tensor,
        out_slot_mapping_ptr: torch.Tensor,
        block_size: int,
        max_model_len: int,
        n_blocks_per_req: int,
        PAD_ID: int,
        batch_size: int,
    ) -> None:
        ops.advance_one(
            positions_ptr[:batch_size],
            block_table_ptr[:batch_size, :n_blocks_per_req],
            seq_lens_ptr,
            out_clamped_positions_ptr,
            out_slot_mapping_ptr,
            block_size,
            max_model_len,
            PAD_ID,
        )

    return eagle_step_slot_mapping_metadata_kernel


def eagle_prepare_inputs_kernel(ops: DraftInputOps) -> Callable[..., None]:
    """eagle_prepare_inputs_padded_kernel on DraftInputOps.sample_indices."""

    def eagle_prepare_inputs_padded_kernel(
        cu_num_draft_tokens_ptr: torch.Tensor,
        valid_sampled_tokens_count_ptr: torch.Tensor,
        query_start_loc_gpu_ptr: torch.Tensor,
        token_indices_to_sample_ptr: torch.Tensor,
        num_rejected_tokens_gpu_ptr: torch.Tensor,
        num_reqs: int,
    ) -> None:
        ops.sample_indices(
            cu_num_draft_tokens_ptr[:num_reqs],
            valid_sampled_tokens_count_ptr,
            query_start_loc_gpu_ptr,
            token_indices_to_sample_ptr,
            num_rejected_tokens_gpu_ptr,
        )

    return eagle_prepare_inputs_padded_kernel


def eagle_next_token_kernel(ops: DraftInputOps) -> Callable[..., None]:
    """eagle_prepare_next_token_padded_kernel on DraftInputOps.next_token_ids."""

    def eagle_prepare_next_token_padded_kernel(
        sampled_token_ids_ptr: torch.Tensor,
        discard_request_mask_ptr: torch.Tensor,
        backup_next_token_ids_ptr: torch.Tensor,
        next_token_ids_ptr: torch.Tensor,
        valid_sampled_tokens_count_ptr: torch.Tensor,
        vocab_size: int,
        num_sampled_tokens_per_req: int,
        num_reqs: int,
        stride_sampled_token_ids: int,
        BLOCK_SIZE_TOKENS: int,
    ) -> None:
        ops.next_token_ids(
            sampled_token_ids_ptr[:num_reqs, :num_sampled_tokens_per_req],
            discard_request_mask_ptr[:num_reqs],
            backup_next_token_ids_ptr,
            next_token_ids_ptr,
            valid_sampled_tokens_count_ptr,
            vocab_size,
        )

    return eagle_prepare_next_token_padded_kernel


def eagle_expand_inputs_kernel(ops: DraftInputOps) -> Callable[..., None]:
    """copy_and_expand_eagle_inputs_kernel on DraftInputOps.expand_inputs (the launch grid
    is one program per request: query_end_loc's length)."""

    def copy_and_expand_eagle_inputs_kernel(
        target_token_ids_ptr: torch.Tensor,
        target_positions_ptr: torch.Tensor,
        next_token_ids_ptr: torch.Tensor,
        out_input_ids_ptr: torch.Tensor,
        out_positions_ptr: torch.Tensor,
        out_is_rejected_token_mask_ptr: torch.Tensor,
        out_is_masked_token_mask_ptr: torch.Tensor,
        out_new_token_indices_ptr: torch.Tensor,
        out_hidden_state_mapping_ptr: torch.Tensor,
        query_start_loc_ptr: torch.Tensor,
        query_end_loc_ptr: torch.Tensor,
        padding_token_id: int,
        parallel_drafting_token_id: int,
        total_input_tokens: int,
        num_padding_slots_per_request: int,
        shift_input_ids: bool,
        BLOCK_SIZE_TOKENS: int,
    ) -> None:
        ops.expand_inputs(
            target_token_ids_ptr,
            target_positions_ptr,
            next_token_ids_ptr,
            query_start_loc_ptr,
            query_end_loc_ptr,
            out_input_ids_ptr,
            out_positions_ptr,
            out_is_rejected_token_mask_ptr,
            out_is_masked_token_mask_ptr,
            out_new_token_indices_ptr,
            out_hidden_state_mapping_ptr,
            padding_token_id,
            parallel_drafting_token_id,
            total_input_tokens,
            num_padding_slots_per_request,
            bool(shift_input_ids),
        )

    return copy_and_expand_eagle_inputs_kernel


def expand_kernel(ops: RejectionOps) -> Callable[..., None]:
    """vLLM 0.33's rejection-sampler expand_kernel on RejectionOps.expand_to_tokens (the
    launch grid is one program per request; MAX_NUM_TOKENS is its tile, of no meaning here)."""

    def expand_kernel(
        output_ptr: torch.Tensor,
        input_ptr: torch.Tensor,
        cu_num_tokens_ptr: torch.Tensor,
        replace_from: float,
        replace_to: float,
        MAX_NUM_TOKENS: int,
    ) -> None:
        output_ptr.copy_(
            ops.expand_to_tokens(
                input_ptr, cu_num_tokens_ptr, output_ptr.shape[0], replace_from, replace_to
            )
        )

    return expand_kernel
