"""Rejection sampling of speculative decoding: verify draft tokens against the target model.

Shapes: B requests, N draft tokens in the step (all requests), K the most drafts of one
request, V vocabulary. A request's drafts are a contiguous run of the N tokens; the runs
are given by `cu_num_drafts` (int32 [B], the cumulative counts). The output is int32
[B, K + 1]: row b holds the accepted drafts, then the target's token at the first
rejection (or the bonus token when every draft was accepted); the rest keeps its
placeholder. No method may read a tensor back to the host: the step runs on the device.
The random draws (uniform per draft, exponential per request and vocabulary entry) are
the caller's, so seeded requests repeat whatever the device.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

from attrs import frozen

if TYPE_CHECKING:
    import torch


@frozen
class Drafts:
    """The step's draft tokens: ids int32/int64 [N] (-1: a padded draft, always rejected),
    cu_num_drafts int32 [B], max_len K."""

    token_ids: torch.Tensor
    cu_num_drafts: torch.Tensor
    max_len: int


class RejectionOps(abc.ABC):
    """The device's verification of draft tokens (vLLM's rejection sampler kernels)."""

    @abc.abstractmethod
    def expand_to_tokens(
        self,
        values: torch.Tensor,
        cu_num_tokens: torch.Tensor,
        num_tokens: int,
        replace_from: float = 0,
        replace_to: float = 0,
    ) -> torch.Tensor:
        """values [B] repeated per draft token -> [num_tokens]; a value equal to
        replace_from becomes replace_to (greedy temperature 0 -> 1)."""

    @abc.abstractmethod
    def verify_greedy(
        self,
        out: torch.Tensor,
        drafts: Drafts,
        target_argmax: torch.Tensor,
        bonus_token_ids: torch.Tensor,
        is_greedy: torch.Tensor | None,
    ) -> None:
        """Greedy verification into `out` [B, K + 1], rows where is_greedy [B] (None: all):
        a draft is accepted while it equals the target's argmax [N]."""

    @abc.abstractmethod
    def recover(
        self,
        drafts: Drafts,
        draft_probs: torch.Tensor | None,
        target_probs: torch.Tensor,
        inv_q: torch.Tensor,
    ) -> torch.Tensor:
        """The token sampled at each draft position should it be rejected [N]: from
        max(target - draft, 0) (draft_probs None: the target with the draft's own token
        removed), by the exponential race argmax(p / q) with inv_q = 1/q [B, V]."""

    @abc.abstractmethod
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
        """Random verification into `out`, rows where not is_greedy [B]: a draft d is
        accepted while target[d] / draft[d] >= uniform [N] (draft probability 1 when
        draft_probs is None; 0 rejects); the first rejected position takes the
        recovered token."""
