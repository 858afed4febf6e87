"""The linear-attention port on an NPU: torch_npu's gated delta rule ops where their
documented shapes allow, the torch ops of adapters/torch/linear_attention.py otherwise.

- npu_chunk_gated_delta_rule (prefills): bf16, Dk = Dv = 128, Nk and Nv <= 64, Nv a
  multiple of Nk. It takes one initial state per sequence and returns the final ones:
  the slots' states are gathered (zeros for a sequence without one) and scattered back.
- npu_recurrent_gated_delta_rule (decodes): bf16, Dk, Dv, Nk, Nv <= 256; it reads and
  writes the state slots in place through ssm_state_indices (one token per sequence
  here), no host sync.
- A gate per key channel (KDA, g [T, Hv, Dk]) runs the torch ops: both torch_npu ops take
  one gate per head and token.
- The causal convolution stays in torch: torch_npu 2.14.0's npu_fused_causal_conv1d
  takes a width-3 kernel only (Qwen3-Next's is 4), documents neither its activation nor
  its bias as supported yet, and lists only the Ascend 950 among its chips.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from adapters.torch.linear_attention import TorchLinearAttentionOps

if TYPE_CHECKING:
    from ports.linear_attention import StateSequences

BF = torch.bfloat16
CHUNK_HEAD_DIM = 128  # npu_chunk_gated_delta_rule: Dk = Dv = 128
CHUNK_MAX_HEADS = 64
RECURRENT_MAX = 256  # npu_recurrent_gated_delta_rule: Dk, Dv, Nk, Nv <= 256


def _all_bf16(*tensors: torch.Tensor) -> bool:
    return all(t.dtype == BF for t in tensors)


class NpuLinearAttentionOps(TorchLinearAttentionOps):
    def __init__(self, torch_npu: Any) -> None:
        self._torch_npu = torch_npu

    @staticmethod
    def chunk_op_takes(q: torch.Tensor, v: torch.Tensor, states: torch.Tensor) -> bool:
        """Whether npu_chunk_gated_delta_rule's documented limits admit these shapes."""
        nk, dk = q.shape[1], q.shape[2]
        nv, dv = v.shape[1], v.shape[2]
        return (
            _all_bf16(q, v, states)
            and dk == dv == CHUNK_HEAD_DIM
            and nk <= CHUNK_MAX_HEADS
            and nv <= CHUNK_MAX_HEADS
            and nv % nk == 0
        )

    @staticmethod
    def recurrent_op_takes(q: torch.Tensor, v: torch.Tensor, states: torch.Tensor) -> bool:
        return _all_bf16(q, v, states) and max(*q.shape[1:], *v.shape[1:]) <= RECURRENT_MAX

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
        if g.dim() != 2 or not self.chunk_op_takes(q, v, ssm_states):
            return super().chunk_gated_delta_rule(q, k, v, g, beta, ssm_states, seqs, scale)
        slots = seqs.state_indices.long()
        initial = torch.where(
            seqs.has_initial_state[:, None, None, None],
            ssm_states.index_select(0, slots),
            torch.zeros((), dtype=ssm_states.dtype, device=ssm_states.device),
        )
        qsl = seqs.query_start_loc
        lens = (qsl[1:] - qsl[:-1]).to(torch.int32)
        out, final = self._torch_npu.npu_chunk_gated_delta_rule(
            q.contiguous(),
            k.contiguous(),
            v.contiguous(),
            beta=beta.to(BF).contiguous(),
            initial_state=initial.contiguous(),
            actual_seq_lengths=lens,
            scale=scale,
            g=g.to(torch.float32).contiguous(),
        )
        ssm_states.index_copy_(0, slots, final.to(ssm_states.dtype))
        return out  # type: ignore[no-any-return]

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
        if g.dim() != 2 or not self.recurrent_op_takes(q, v, ssm_states):
            return super().recurrent_gated_delta_rule(
                q, k, v, g, beta, ssm_states, state_indices, scale
            )
        rows = q.shape[0]
        return self._torch_npu.npu_recurrent_gated_delta_rule(  # type: ignore[no-any-return]
            q.contiguous(),
            k.contiguous(),
            v.contiguous(),
            ssm_states,
            beta=beta.to(BF).contiguous(),
            scale=scale,
            actual_seq_lengths=torch.ones(rows, dtype=torch.int32, device=q.device),
            ssm_state_indices=state_indices.to(torch.int32),
            g=g.to(torch.float32).contiguous(),
        )
