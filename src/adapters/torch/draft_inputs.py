"""A draft model's input bookkeeping in plain torch, shared by the device adapters
(ports/draft_inputs.py): the semantics of vLLM 0.33's EAGLE input kernels.

Per-token work finds its request with searchsorted over the run boundaries (no
repeat_interleave, whose output size would have to be read back to the host).
"""

from __future__ import annotations

import torch

from ports.draft_inputs import DraftInputOps


def _starts(cumulative: torch.Tensor) -> torch.Tensor:
    return torch.cat([cumulative.new_zeros(1), cumulative[:-1]])


class TorchDraftInputOps(DraftInputOps):
    """The reference semantics, vectorised over the batch."""

    def next_token_ids(
        self,
        sampled_token_ids: torch.Tensor,
        discard: torch.Tensor,
        backup_token_ids: torch.Tensor,
        out_next_token_ids: torch.Tensor,
        out_valid_count: torch.Tensor,
        vocab_size: int,
    ) -> None:
        batch, width = sampled_token_ids.shape
        tokens = sampled_token_ids.to(torch.int64)
        valid = (tokens != -1) & (tokens < vocab_size)
        count = valid.sum(dim=1)
        cols = torch.arange(width, device=tokens.device)
        last = torch.where(valid, cols, -1).amax(dim=1).clamp(min=0)
        last_token = tokens.gather(1, last.unsqueeze(1)).squeeze(1)
        backup = backup_token_ids[:batch].to(torch.int64)
        use_backup = discard[:batch] | (count == 0)
        out_next_token_ids[:batch].copy_(torch.where(use_backup, backup, last_token))
        out_valid_count[:batch].copy_(torch.where(discard[:batch], 0, count))

    def sample_indices(
        self,
        cu_num_draft_tokens: torch.Tensor,
        valid_count: torch.Tensor,
        query_start_loc: torch.Tensor,
        out_token_indices: torch.Tensor,
        out_num_rejected: torch.Tensor,
    ) -> None:
        batch = cu_num_draft_tokens.shape[0]
        cu = cu_num_draft_tokens.to(torch.int64)
        drafts = cu - _starts(cu)
        rejected = drafts + 1 - valid_count[:batch].to(torch.int64)
        rejected = torch.where(drafts > 0, rejected, 0)
        last = query_start_loc[1 : batch + 1].to(torch.int64) - 1
        out_num_rejected[:batch].copy_(rejected)
        out_token_indices[:batch].copy_(last - rejected)

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
        batch = positions.shape[0]
        new = positions.to(torch.int64) + 1
        beyond = new >= max_model_len
        clamped = torch.where(beyond, 0, new)
        block_index = (clamped // block_size).clamp(max=block_table.shape[1] - 1)
        block = block_table[:batch].gather(1, block_index.unsqueeze(1)).squeeze(1)
        slot = block.to(torch.int64) * block_size + clamped % block_size
        out_slot_mapping.fill_(pad_slot)
        out_slot_mapping[:batch].copy_(torch.where(beyond, pad_slot, slot))
        out_positions[:batch].copy_(clamped)
        grown = torch.where(beyond, 1, seq_lens[:batch].to(torch.int64) + 1)
        seq_lens[:batch].copy_(grown.clamp(max=max_model_len))

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
        device = target_token_ids.device
        batch = query_end_loc.shape[0]
        slots = slots_per_request
        shift = int(shift_input_ids)
        starts = query_start_loc[:batch].to(torch.int64)
        ends = query_start_loc[1 : batch + 1].to(torch.int64)
        last = query_end_loc.to(torch.int64)
        req = torch.arange(batch, device=device)
        num_valid = last - starts + 1 - shift
        out_start = starts + req * (slots - shift)
        num_out = ends - starts + slots - shift  # valid + slots + rejected, per request
        # Every output token: its request, and its place j in the request's run.
        total = num_input_tokens + batch * (slots - shift)
        index = torch.arange(total, device=device)
        owner = torch.searchsorted(out_start + num_out, index, right=True).clamp(max=batch - 1)
        j = index - out_start[owner]
        valid_j = num_valid[owner]
        is_valid = j < valid_j
        is_bonus = j == valid_j
        is_parallel = (j > valid_j) & (j < valid_j + slots)
        is_rejected = j >= valid_j + slots
        source = (starts[owner] + shift + j).clamp(max=num_input_tokens - 1)
        tokens = torch.where(is_valid, target_token_ids[source].to(torch.int64), 0)
        tokens = torch.where(is_bonus, next_token_ids[owner].to(torch.int64), tokens)
        tokens = torch.where(is_parallel, parallel_drafting_token_id, tokens)
        tokens = torch.where(is_rejected, padding_token_id, tokens)
        positions = target_positions[starts[owner]].to(torch.int64) + j
        positions = torch.where(is_rejected, 0, positions)
        out_input_ids[:total].copy_(tokens)
        out_positions[:total].copy_(positions)
        out_is_rejected[:total].copy_(is_rejected)
        out_is_masked[:total].copy_(is_parallel)
        new_tokens = (out_start + num_valid).unsqueeze(1) + torch.arange(slots, device=device)
        out_new_token_indices[: batch * slots].copy_(new_tokens.reshape(-1))
        if shift_input_ids:
            tok = torch.arange(num_input_tokens, device=device)
            tok_owner = torch.searchsorted(ends, tok, right=True)
            inside = tok_owner < batch
            tok_owner = tok_owner.clamp(max=batch - 1)
            dest = out_start[tok_owner] + tok - starts[tok_owner]
            mapping = out_hidden_state_mapping[:num_input_tokens]
            mapping.copy_(torch.where(inside, dest, mapping.to(torch.int64)))
