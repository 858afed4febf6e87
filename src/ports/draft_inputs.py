"""Draft-model speculation's input bookkeeping: what vLLM's EAGLE/MTP/draft-model proposers
compute with Triton kernels between the target's step and the draft's (vllm 0.33
v1/spec_decode/utils.py).

Shapes: B requests, T the target step's tokens, k draft tokens per request. Every method
writes its outputs in place and may not read a tensor back to the host: the step runs on
the device.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


class DraftInputOps(abc.ABC):
    """The device's preparation of a draft model's inputs."""

    @abc.abstractmethod
    def next_token_ids(
        self,
        sampled_token_ids: torch.Tensor,
        discard: torch.Tensor,
        backup_token_ids: torch.Tensor,
        out_next_token_ids: torch.Tensor,
        out_valid_count: torch.Tensor,
        vocab_size: int,
    ) -> None:
        """Per request b of sampled_token_ids [B, 1 + k] (-1 or >= vocab_size: not a
        token): out_valid_count[b] the valid ones, out_next_token_ids[b] the last valid
        one; backup_token_ids[b] [B] where none is valid or discard[b] (bool [B]), whose
        count is 0."""

    @abc.abstractmethod
    def sample_indices(
        self,
        cu_num_draft_tokens: torch.Tensor,
        valid_count: torch.Tensor,
        query_start_loc: torch.Tensor,
        out_token_indices: torch.Tensor,
        out_num_rejected: torch.Tensor,
    ) -> None:
        """Per request b of cu_num_draft_tokens [B] (cumulative drafts): the rejected
        drafts, 1 + drafts - valid_count[b] (0 without drafts), into out_num_rejected[b];
        the index of its last accepted token in the step, query_start_loc[b + 1] - 1 -
        rejected, into out_token_indices[b]."""

    @abc.abstractmethod
    def advance_one(
        self,
        positions: torch.Tensor,
        block_table: torch.Tensor,
        seq_lens: torch.Tensor,
        out_positions: torch.Tensor,
        out_slot_mapping: torch.Tensor,
        block_size: int,
        max_model_len: int,
        pad_slot: int,
    ) -> None:
        """One autoregressive draft step for positions [B] (int64): out_positions[:B]
        positions + 1 (0 where that reaches max_model_len), out_slot_mapping[:B] its KV
        slot from block_table [B, blocks] (pad_slot where it reached max_model_len, and in
        every entry past B: graph padding), seq_lens [B] + 1 in place (1 where it
        reached max_model_len, never above it)."""

    @abc.abstractmethod
    def expand_inputs(
        self,
        target_token_ids: torch.Tensor,
        target_positions: torch.Tensor,
        next_token_ids: torch.Tensor,
        query_start_loc: torch.Tensor,
        query_end_loc: torch.Tensor,
        out_input_ids: torch.Tensor,
        out_positions: torch.Tensor,
        out_is_rejected: torch.Tensor,
        out_is_masked: torch.Tensor,
        out_new_token_indices: torch.Tensor,
        out_hidden_state_mapping: torch.Tensor,
        padding_token_id: int,
        parallel_drafting_token_id: int,
        num_input_tokens: int,
        slots_per_request: int,
        shift_input_ids: bool,
    ) -> None:
        """The draft's first-pass inputs from the target step's T tokens, request b's run
        query_start_loc[b] .. query_start_loc[b + 1] [B + 1], its last accepted token at
        query_end_loc[b] [B]. Per request, in order: its accepted tokens (shifted by one
        when shift_input_ids: EAGLE's inputs are the next tokens), next_token_ids[b],
        slots_per_request - 1 parallel-drafting slots, then its rejected tokens as
        padding (position 0, out_is_rejected). out_new_token_indices [B * slots] where the
        next token and the parallel slots went (out_is_masked marks the latter); with
        shift_input_ids, out_hidden_state_mapping [T] where each target token's hidden
        state goes."""
