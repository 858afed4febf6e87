"""NpuOps.graph_host_arguments: the lengths lists each fused attention launch takes."""

from __future__ import annotations

from types import ModuleType

import torch

from adapters.npu.ops import NpuOps
from adapters.torch.attention_plan import build_attention_plan


def test_one_dict_per_launch_with_each_parts_lengths_in_launch_order() -> None:
    # 2 decodes and a 3-token prefill: paged_attention launches the decode part, then
    # the prefill part; an update gives each its lists.
    plan = build_attention_plan(
        torch.tensor([0, 1, 4, 5], dtype=torch.int32),
        torch.tensor([7, 3, 12], dtype=torch.int32),
        torch.zeros(3, 1, dtype=torch.int32),
    )
    ops = NpuOps(ModuleType("torch_npu"))  # no launch: the lists come from the plan
    assert ops.graph_host_arguments(plan) == [
        {"actual_seq_lengths": [1, 1], "actual_seq_lengths_kv": [7, 12]},
        {"actual_seq_lengths": [3], "actual_seq_lengths_kv": [3]},
    ]
    empty = build_attention_plan(torch.zeros(1, dtype=torch.int32),
                                 torch.zeros(0, dtype=torch.int32),
                                 torch.zeros(0, 1, dtype=torch.int32))
    assert ops.graph_host_arguments(empty) == []


class _RecordingTorchNpu(ModuleType):
    """The one torch_npu op the MLA attention launches, recording its host-side lists."""

    def __init__(self) -> None:
        super().__init__("torch_npu")
        self.lists: list[dict[str, list[int]]] = []

    def npu_fused_infer_attention_score(self, query, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.lists.append({k: kwargs[k] for k in ("actual_seq_lengths", "actual_seq_lengths_kv")
                           if k in kwargs})
        return torch.zeros((*query.shape[:-1], 4)), None


def test_mla_one_dict_per_launch_as_the_layer_launches_them() -> None:
    """An MLA layer runs its prefill part (TND: running sums), then its decode part (one
    token a row: the context lengths); the update gives each launch what it took."""
    from adapters.npu.mla import NpuMlaOps
    from ports.mla import LatentCache

    plan = build_attention_plan(
        torch.tensor([0, 1, 2, 5, 7], dtype=torch.int32),
        torch.tensor([7, 3, 12, 2], dtype=torch.int32),
        torch.zeros(4, 1, dtype=torch.int32),
        num_decodes=2,
    )
    assert plan.decode is not None and plan.prefill is not None
    torch_npu = _RecordingTorchNpu()
    ops = NpuMlaOps(torch_npu)
    heads, cache = 2, LatentCache(torch.zeros(1, 128, 4), torch.zeros(1, 128, 2))
    ops.prefill_attention(torch.zeros(5, heads, 6), torch.zeros(14, heads, 6),
                          torch.zeros(14, heads, 4), plan.prefill, 1.0)
    ops.latent_decode(torch.zeros(2, heads, 4), torch.zeros(2, heads, 2), cache,
                      plan.decode, 1.0)
    assert ops.graph_host_arguments(plan) == torch_npu.lists == [
        {"actual_seq_lengths": [3, 5], "actual_seq_lengths_kv": [12, 14]},
        {"actual_seq_lengths_kv": [7, 3]},
    ]
