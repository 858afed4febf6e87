"""The emulated MoE index conventions, as CANN's aclnn docs write them.

npu_moe_init_routing_v2: the scatter index (row_idx_type 1) names, for permuted row i,
the flat (token, slot) it came from; the gather index (row_idx_type 0) is its inverse,
-1 for slots outside the active expert range. npu_moe_token_unpermute gathers: slot j of
token t reads row sorted_indices[t * k + j] (aclnnMoeTokenUnpermute: T[k] = T[S[k]]).
"""

from __future__ import annotations

import torch

from support.torch_npu_emulator import make_torch_npu

BF = torch.bfloat16


def _route(tnpu, row_idx_type: int, active: list[int]):  # type: ignore[no-untyped-def]
    x = torch.arange(4, dtype=BF).unsqueeze(1).expand(4, 3).contiguous()  # token t: t's
    ids = torch.tensor([[0, 4], [4, 3], [4, 2], [1, 1]], dtype=torch.int32)
    return tnpu.npu_moe_init_routing_v2(
        x, ids, expert_num=5, expert_tokens_num_type=1, expert_tokens_num_flag=True,
        active_expert_range=active, row_idx_type=row_idx_type,
    )


def test_scatter_and_gather_indices_are_inverse_permutations() -> None:
    tnpu = make_torch_npu()
    expanded, scatter, counts, _ = _route(tnpu, 1, [0, 5])
    _, gather, _, _ = _route(tnpu, 0, [0, 5])
    # Stable by expert: expert 0 (slot 0), 1 (slots 6, 7), 2 (5), 3 (3), 4 (1, 2, 4).
    assert scatter.tolist() == [0, 6, 7, 5, 3, 1, 2, 4]
    assert counts.tolist() == [1, 2, 1, 1, 3]
    assert expanded[:, 0].tolist() == [0, 3, 3, 2, 1, 0, 1, 2]  # row i holds token scatter[i] // 2
    assert gather[scatter.long()].tolist() == list(range(8))
    _, gather, counts, _ = _route(tnpu, 0, [1, 4])  # experts 1-3 only: slots 3, 5, 6, 7
    assert counts.tolist() == [2, 1, 1]
    assert gather.tolist() == [-1, -1, -1, 3, -1, 2, 0, 1]


def test_unpermute_gathers_each_slot_from_its_row() -> None:
    tnpu = make_torch_npu()
    rows = torch.tensor([[1.0], [2.0], [4.0], [8.0]], dtype=BF)
    probs = torch.tensor([[1.0, 2.0], [0.5, 0.25]], dtype=BF)
    out = tnpu.npu_moe_token_unpermute(rows, torch.tensor([2, 0, 3, 1], dtype=torch.int32), probs)
    assert out[:, 0].tolist() == [4.0 * 1.0 + 1.0 * 2.0, 8.0 * 0.5 + 2.0 * 0.25]
