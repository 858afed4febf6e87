"""NpuOps.graph_host_arguments: the lengths lists each fused attention launch takes."""

from __future__ import annotations

from types import ModuleType

import torch

from adapters.attention_plan import build_attention_plan
from adapters.npu.ops import NpuOps


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
