"""Golden tests: NpuLinearAttentionOps on the emulated torch_npu against the host's
TorchLinearAttentionOps, at shapes npu_chunk_gated_delta_rule documents (Dk = Dv = 128,
GQA 1 -> 2 heads as the tiny Qwen3-Next, bf16).

Tolerance: one bf16 rounding. Both sides compute in float32 from the same bf16 inputs,
but in different forms (the emulator token by token, the host in 64-row chunks), so
their float32 results differ in the last bits and may round to neighbouring bf16
values: torch's bf16 default (rtol 1.6e-2) covers one ulp (2^-8 relative).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from adapters.npu.linear_attention import NpuLinearAttentionOps
from adapters.torch.linear_attention import TorchLinearAttentionOps
from ports.linear_attention import StateSequences
from support.torch_npu_emulator import make_torch_npu

HK, HV, D = 1, 2, 128
BF = torch.bfloat16
HOST = TorchLinearAttentionOps()


@pytest.fixture
def tnpu():
    return make_torch_npu()


def _inputs(tokens: int, seed: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(tokens, HK, D, generator=gen), dim=-1).to(BF)
    k = F.normalize(torch.randn(tokens, HK, D, generator=gen), dim=-1).to(BF)
    v = torch.randn(tokens, HV, D, generator=gen).to(BF)
    g = -torch.rand(tokens, HV, generator=gen) * 0.5
    beta = torch.rand(tokens, HV, generator=gen).to(BF)
    return q, k, v, g, beta


def _seqs(lens: list[int], slots: list[int], initial: list[bool]) -> StateSequences:
    qsl = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    return StateSequences(qsl, torch.tensor(slots, dtype=torch.int32), torch.tensor(initial))


def test_chunked_prefill_on_the_npu_op_equals_the_host(tnpu) -> None:
    npu = NpuLinearAttentionOps(tnpu)
    lens, slots, initial = [3, 70, 20], [4, 1, 2], [False, True, True]
    q, k, v, g, beta = _inputs(sum(lens), seed=0)
    states = (torch.randn(5, HV, D, D, generator=torch.Generator().manual_seed(1)) * 0.1).to(BF)
    host_states = states.clone()
    seqs = _seqs(lens, slots, initial)
    got = npu.chunk_gated_delta_rule(q, k, v, g, beta, states, seqs, D**-0.5)
    want = HOST.chunk_gated_delta_rule(q, k, v, g, beta, host_states, seqs, D**-0.5)
    assert [c[0] for c in tnpu.calls] == ["npu_chunk_gated_delta_rule"]
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(states, host_states)
    assert torch.equal(states[[0, 3]], host_states[[0, 3]])  # slots no sequence names


def test_recurrent_decode_on_the_npu_op_equals_the_host(tnpu) -> None:
    npu = NpuLinearAttentionOps(tnpu)
    q, k, v, g, beta = _inputs(3, seed=2)
    states = (torch.randn(6, HV, D, D, generator=torch.Generator().manual_seed(3)) * 0.1).to(BF)
    host_states = states.clone()
    slots = torch.tensor([5, 0, 3], dtype=torch.int32)
    got = npu.recurrent_gated_delta_rule(q, k, v, g, beta, states, slots, D**-0.5)
    want = HOST.recurrent_gated_delta_rule(q, k, v, g, beta, host_states, slots, D**-0.5)
    assert [c[0] for c in tnpu.calls] == ["npu_recurrent_gated_delta_rule"]
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(states, host_states)


def test_shapes_the_chunk_op_refuses_stay_on_torch(tnpu) -> None:
    """Head dims other than 128 (and float32) are outside npu_chunk_gated_delta_rule's
    documented limits: the adapter computes those in torch, not on the op."""
    npu = NpuLinearAttentionOps(tnpu)
    q = torch.zeros(4, 1, 64, dtype=BF)
    v = torch.zeros(4, 2, 64, dtype=BF)
    states = torch.zeros(2, 2, 64, 64, dtype=BF)
    assert not npu.chunk_op_takes(q, v, states)
    assert not npu.chunk_op_takes(q.float(), v.float(), states.float())
    assert npu.chunk_op_takes(torch.zeros(4, 1, D, dtype=BF), torch.zeros(4, 2, D, dtype=BF),
                              torch.zeros(2, 2, D, D, dtype=BF))
    npu.chunk_gated_delta_rule(
        q, q, v, torch.zeros(4, 2), torch.zeros(4, 2, dtype=BF), states,
        _seqs([4], [0], [False]), 0.125,
    )
    assert tnpu.calls == []


def test_the_emulated_op_refuses_what_its_docs_refuse(tnpu) -> None:
    q, k, v, g, beta = _inputs(4, seed=4)
    init = torch.zeros(1, HV, D, D, dtype=BF)
    lens = torch.tensor([4], dtype=torch.int32)
    with pytest.raises(ValueError, match="Dk and Dv must be 128"):
        tnpu.npu_chunk_gated_delta_rule(
            q[..., :64], k[..., :64], v, beta=beta, initial_state=init,
            actual_seq_lengths=lens, scale=0.1, g=g,
        )
    with pytest.raises(ValueError, match="g must be float32"):
        tnpu.npu_chunk_gated_delta_rule(
            q, k, v, beta=beta, initial_state=init, actual_seq_lengths=lens, scale=0.1,
            g=g.to(BF),
        )
    with pytest.raises(ValueError, match="at most 8 tokens"):
        tnpu.npu_recurrent_gated_delta_rule(
            torch.zeros(9, HK, D, dtype=BF), torch.zeros(9, HK, D, dtype=BF),
            torch.zeros(9, HV, D, dtype=BF), init, beta=torch.zeros(9, HV, dtype=BF),
            scale=0.1, actual_seq_lengths=torch.tensor([9], dtype=torch.int32),
            ssm_state_indices=torch.zeros(9, dtype=torch.int32), g=torch.zeros(9, HV),
        )
