"""Rejection sampling in plain torch, shared by the device adapters (ports/rejection.py).

Vectorised over the batch: the drafts [N] are laid out as a [B, K] grid (by scatter, no
host read), a request's accepted count is the cumulative product of its accept flags,
and the output row is written with masks. Nothing reads a tensor back to the host.
"""

from __future__ import annotations

import torch

from ports.rejection import Drafts, RejectionOps


class _Grid:
    """Where each of the N drafts sits in the [B, K] grid, and each request's count."""

    def __init__(self, drafts: Drafts) -> None:
        cu = drafts.cu_num_drafts.to(torch.int64)
        device = cu.device
        batch = cu.shape[0]
        num_tokens = drafts.token_ids.shape[0]
        starts = torch.cat([cu.new_zeros(1), cu[:-1]])
        self.counts = cu - starts  # [B]
        self.req = torch.repeat_interleave(
            torch.arange(batch, device=device), self.counts, output_size=num_tokens
        )  # [N]
        self.pos = torch.arange(num_tokens, device=device) - starts[self.req]  # [N]
        self.batch = batch
        self.max_len = drafts.max_len
        cols = torch.arange(self.max_len + 1, device=device)
        self.cols = cols  # [K + 1]

    def to_grid(self, values: torch.Tensor, fill: float | int) -> torch.Tensor:
        """values [N] -> [B, K] with `fill` where a request has fewer drafts."""
        grid = values.new_full((self.batch, self.max_len), fill)
        grid[self.req, self.pos] = values
        return grid

    def write(
        self,
        out: torch.Tensor,
        tokens: torch.Tensor,
        accepted: torch.Tensor,
        bonus: torch.Tensor,
        rows: torch.Tensor | None,
    ) -> None:
        """Row b: tokens[b, :n+1] where n drafts were accepted, bonus at column `count`
        when all were; only rows where `rows` (None: all)."""
        k = self.max_len
        cols = self.cols[:k].unsqueeze(0)
        # Grid cells past a request's drafts hold fill values that may compare equal.
        flags = (accepted & (cols < self.counts.unsqueeze(1))).to(torch.int64)
        n_acc = torch.cumprod(flags, dim=1).sum(dim=1)  # leading accepted drafts [B]
        take = (cols <= n_acc.unsqueeze(1)) & (cols < self.counts.unsqueeze(1))
        all_in = (n_acc == self.counts).unsqueeze(1)
        bonus_at = (self.cols.unsqueeze(0) == self.counts.unsqueeze(1)) & all_in  # [B, K+1]
        if rows is not None:
            take = take & rows.unsqueeze(1)
            bonus_at = bonus_at & rows.unsqueeze(1)
        body = out[:, :k]
        body.copy_(torch.where(take, tokens.to(out.dtype), body))
        bonus_col = bonus.reshape(-1, 1).to(out.dtype).expand(-1, k + 1)
        out.copy_(torch.where(bonus_at, bonus_col, out))


class TorchRejectionOps(RejectionOps):
    """The reference semantics of vLLM 0.33's rejection kernels, in torch ops."""

    def expand_to_tokens(
        self,
        values: torch.Tensor,
        cu_num_tokens: torch.Tensor,
        num_tokens: int,
        replace_from: float = 0,
        replace_to: float = 0,
    ) -> torch.Tensor:
        cu = cu_num_tokens.to(torch.int64)
        counts = cu - torch.cat([cu.new_zeros(1), cu[:-1]])
        replaced = torch.where(values == replace_from, values.new_full((), replace_to), values)
        return torch.repeat_interleave(replaced, counts, output_size=num_tokens)

    def verify_greedy(
        self,
        out: torch.Tensor,
        drafts: Drafts,
        target_argmax: torch.Tensor,
        bonus_token_ids: torch.Tensor,
        is_greedy: torch.Tensor | None,
    ) -> None:
        grid = _Grid(drafts)
        draft = grid.to_grid(drafts.token_ids.to(torch.int64), -1)
        target = grid.to_grid(target_argmax.to(torch.int64), -1)
        grid.write(out, target, draft == target, bonus_token_ids, is_greedy)

    def recover(
        self,
        drafts: Drafts,
        draft_probs: torch.Tensor | None,
        target_probs: torch.Tensor,
        inv_q: torch.Tensor,
    ) -> torch.Tensor:
        grid = _Grid(drafts)
        if draft_probs is None:
            ids = drafts.token_ids.to(torch.int64).clamp(min=0).unsqueeze(1)
            prob = target_probs.scatter(1, ids, 0.0)
        else:
            prob = (target_probs - draft_probs).clamp(min=0.0)
        score = prob.to(inv_q.dtype) * inv_q[grid.req]
        return score.argmax(dim=1).to(drafts.token_ids.dtype)

    def verify_random(
        self,
        out: torch.Tensor,
        drafts: Drafts,
        draft_probs: torch.Tensor | None,
        target_probs: torch.Tensor,
        bonus_token_ids: torch.Tensor,
        recovered_token_ids: torch.Tensor,
        uniform: torch.Tensor,
        is_greedy: torch.Tensor,
    ) -> None:
        grid = _Grid(drafts)
        ids = drafts.token_ids.to(torch.int64)
        safe = ids.clamp(min=0).unsqueeze(1)
        target_p = target_probs.gather(1, safe).squeeze(1).to(torch.float64)
        if draft_probs is None:
            draft_p = torch.ones_like(target_p)
        else:
            draft_p = draft_probs.gather(1, safe).squeeze(1).to(torch.float64)
        # A zero draft probability rejects (no division by zero, no NaN).
        ratio = target_p / torch.where(draft_p > 0, draft_p, torch.ones_like(draft_p))
        ok = (ids >= 0) & (draft_p > 0) & (ratio >= uniform.to(torch.float64))
        tokens = torch.where(ok, ids, recovered_token_ids.to(torch.int64))
        accepted = grid.to_grid(ok, False)
        grid.write(out, grid.to_grid(tokens, -1), accepted, bonus_token_ids, ~is_greedy)
