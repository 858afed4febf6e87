"""The host's sampling and slot-mapping ports against real torch: the native kernel where
it takes the call (a stand-in kernel here: no compiler runs), torch's answer otherwise."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from adapters.cpu.sampling import CpuSamplingOps
from adapters.cpu.slot_mapping import CpuSlotMapping
from ports.sampling import SamplingOps
from ports.slot_mapping import SlotMapping

BLOCK = 4
PAD = -1


class CountingArgmax:
    """A stand-in for the native argmax: torch's answer, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return logits.argmax(dim=-1)


def _hard_logits() -> torch.Tensor:
    x = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    x[0, 30] = x[0, 3] = 9.0  # a tie: the first
    x[1, 7] = float("nan")  # NaN is the maximum
    x[2] = float("-inf")  # all -inf: index 0
    return x


def test_greedy_without_the_native_build_is_torchs_argmax() -> None:
    ops = CpuSamplingOps(kernel=lambda: None)
    assert isinstance(ops, SamplingOps)
    x = _hard_logits()
    got = ops.greedy(x)
    assert got.dtype == torch.int64 and got.tolist() == [3, 7, 0, int(x[3].argmax())]


def test_greedy_takes_the_native_kernel_for_float32_rows_only() -> None:
    kernel = CountingArgmax()
    ops = CpuSamplingOps(kernel=lambda: kernel)
    x = _hard_logits()
    assert torch.equal(ops.greedy(x), x.argmax(dim=-1)) and kernel.calls == 1
    for other in (x.to(torch.bfloat16), x.t().contiguous().t(), x[0]):
        assert torch.equal(ops.greedy(other), other.argmax(dim=-1).view(-1))
    assert kernel.calls == 1  # bf16, strided rows, 1-D: torch's argmax


def _batch(index: torch.dtype) -> dict[str, Any]:
    """Two requests (3 tokens from position 2, 2 tokens from position 7) in a 3-wide table."""
    return {
        "query_start_loc": torch.tensor([0, 3, 5], dtype=torch.int32),
        "positions": torch.tensor([2, 3, 4, 7, 8], dtype=index),
        "block_table": torch.tensor([[5, 9, 0], [2, 6, 1]], dtype=index),
    }


def _compute(slots: SlotMapping, batch: dict[str, Any], out: torch.Tensor) -> None:
    slots.compute(5, 7, batch["query_start_loc"], batch["positions"], batch["block_table"],
                  3, out, BLOCK, PAD)


# position p of request r: block_table[r][p // 4] * 4 + p % 4
EXPECTED = [5 * 4 + 2, 5 * 4 + 3, 9 * 4 + 0, 6 * 4 + 3, 1 * 4 + 0, PAD, PAD]


@pytest.mark.parametrize("index", [torch.int32, torch.int64])
def test_slot_mapping_without_the_native_build_is_the_torch_version(index: torch.dtype) -> None:
    out = torch.full((9,), 99, dtype=torch.int64)
    _compute(CpuSlotMapping(kernel=lambda: None), _batch(index), out)
    assert out.tolist() == [*EXPECTED, 99, 99]  # nothing past max_num_tokens


def test_slot_mapping_hands_contiguous_int_tensors_to_the_native_kernel() -> None:
    seen: list[tuple[Any, ...]] = []
    _compute(CpuSlotMapping(kernel=lambda: lambda *a: seen.append(a)), _batch(torch.int64),
             torch.zeros(7, dtype=torch.int64))
    assert len(seen) == 1 and seen[0][:2] == (5, 7) and seen[0][5:] == (3, seen[0][6], BLOCK, PAD)


def test_slot_mapping_of_strided_positions_stays_on_torch() -> None:
    batch = _batch(torch.int64)
    spaced = torch.zeros(10, dtype=torch.int64)
    spaced[::2] = batch["positions"]
    batch["positions"] = spaced[::2]  # not contiguous: the native kernel does not take it

    def refuse() -> None:
        raise AssertionError("the native kernel was asked for")

    out = torch.zeros(7, dtype=torch.int64)
    _compute(CpuSlotMapping(kernel=refuse), batch, out)  # type: ignore[arg-type]
    assert out.tolist() == EXPECTED
