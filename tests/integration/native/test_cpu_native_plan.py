"""The accelerated host ops refuse a plan built without the rows the native kernel reads
(it builds the native kernel: an integration test)."""

from __future__ import annotations

import attrs
import pytest
import torch

from adapters.cpu.ops import CpuOps
from unit.cpu.test_cpu_ops import _paged_batch


def test_a_plan_without_token_rows_is_refused_with_the_fix() -> None:
    gen = torch.Generator().manual_seed(6)
    query, kc, vc, meta = _paged_batch([1, 3], [6, 3], 4, 2, 16, 4, torch.float32, gen)
    reference_plan = attrs.evolve(meta, token_block_table=None, token_seq_lens=None)
    ops = CpuOps()
    if ops._native_kernel(query, (kc, vc)) is None:
        pytest.skip("the native attention kernel is not built here: the reference path serves")
    with pytest.raises(ValueError, match=r"CpuOps\.plan_needs"):
        ops.paged_attention(query, kc, vc, reference_plan, 0.25, torch.empty_like(query))
