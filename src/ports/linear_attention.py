"""Linear attention: the gated delta net (Qwen3-Next, Qwen3.5) and Kimi delta attention (KDA,
Kimi-Linear) over per-request state slots.

A GDN layer keeps two states per request in vLLM's hybrid KV cache, each in the slot its
block table names: the causal convolution's last W-1 inputs, `conv_states` [slots, W-1, D]
(vLLM's SD layout), and the recurrent state, `ssm_states` [slots, Hv, Dv, Dk] (vLLM's and
torch_npu's layout: each head's matrix S maps a key to a value, S @ k). Every op updates the
states of the sequences it is given in place and leaves the other slots alone.

The delta rule, per head, token by token (q and k l2-normalized by the caller, alpha =
exp(g), g <= 0):  S <- alpha * S;  S <- S + beta * (v - S k) k^T;  o = scale * S q.
Queries and keys have Hk heads, values Hv (a multiple of Hk): value head h reads key head
h // (Hv / Hk). The chunked form (prefill) and the recurrent form (decode) compute the same.

KDA is the same rule with a gate per key channel: g [T, Hv, Dk] instead of [T, Hv], and
S <- S diag(exp(g)) (each column of S, a key channel, decays by its own rate). The delta-rule
ops take either shape; the gate's rank says which.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

from attrs import frozen

if TYPE_CHECKING:
    import torch


@frozen
class StateSequences:
    """Sequences of one step, back to back in the token rows they come with.

    query_start_loc [B+1] int32 (from 0): sequence b's rows; state_indices [B] int32: its
    state slot; has_initial_state [B] bool: whether it continues from its slot's states
    (False: it starts from zeros, the slot's contents are ignored).
    """

    query_start_loc: torch.Tensor
    state_indices: torch.Tensor
    has_initial_state: torch.Tensor


class LinearAttentionOps(abc.ABC):
    """The causal convolution and the gated delta rule, prefill and decode."""

    @abc.abstractmethod
    def causal_conv1d(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        conv_states: torch.Tensor,
        seqs: StateSequences,
    ) -> torch.Tensor:
        """silu(depthwise causal conv of each sequence, after its slot's W-1 inputs (or
        zeros)); each slot then holds the last W-1 inputs of its sequence. x [T, D],
        weight [D, W]; returns [T, D] in x's dtype."""

    @abc.abstractmethod
    def causal_conv1d_update(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        conv_states: torch.Tensor,
        state_indices: torch.Tensor,
    ) -> torch.Tensor:
        """causal_conv1d for decodes: row i is the one new token of the sequence in slot
        state_indices[i], which continues from its slot. No host sync."""

    @abc.abstractmethod
    def chunk_gated_delta_rule(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        ssm_states: torch.Tensor,
        seqs: StateSequences,
        scale: float,
    ) -> torch.Tensor:
        """The delta rule over whole sequences (prefills, chunked inside). q, k [T, Hk, Dk],
        v [T, Hv, Dv], g (float32) [T, Hv] (GDN) or [T, Hv, Dk] (KDA, Hk = Hv), beta [T, Hv];
        returns [T, Hv, Dv] in v's dtype."""

    @abc.abstractmethod
    def recurrent_gated_delta_rule(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        ssm_states: torch.Tensor,
        state_indices: torch.Tensor,
        scale: float,
    ) -> torch.Tensor:
        """One step of the delta rule per row (decodes): row i continues the sequence in
        slot state_indices[i]. Shapes as chunk_gated_delta_rule's. No host sync."""
