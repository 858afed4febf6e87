"""The LoRA port (ports/lora.py) on both adapters (host tensors here; the emulated `npu`
device in tests/integration/npu): each row's adapter slot, -1 rows untouched, against a
row-by-row reference."""

from __future__ import annotations

import pytest
import torch

from adapters.torch.lora import TorchLoraOps
from ports.lora import LoraOps

PORTS = [TorchLoraOps()]
SLOTS = torch.tensor([1, -1, 0, 2, 1, -1])  # rows with three slots and none, mixed


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(3)


@pytest.mark.parametrize("ops", PORTS, ids=lambda o: type(o).__name__)
@pytest.mark.parametrize("vllm_layout", [True, False])
def test_shrink_takes_each_rows_slot_and_zeros_rows_without_one(
    ops: LoraOps, vllm_layout: bool
) -> None:
    x = torch.randn(6, 16, generator=_gen())
    lora_a = torch.randn(3, 4, 16, generator=_gen())
    out = torch.full((6, 4), 7.0)
    ops.shrink(out, x, lora_a.unsqueeze(1) if vllm_layout else lora_a, SLOTS, 0.5)
    for row, slot in enumerate(SLOTS.tolist()):
        want = torch.zeros(4) if slot < 0 else 0.5 * lora_a[slot] @ x[row]
        torch.testing.assert_close(out[row], want)


@pytest.mark.parametrize("ops", PORTS, ids=lambda o: type(o).__name__)
@pytest.mark.parametrize("add", [True, False])
def test_expand_writes_its_column_slice_and_leaves_rows_without_a_slot(
    ops: LoraOps, add: bool
) -> None:
    x = torch.randn(6, 4, generator=_gen())
    lora_b = torch.randn(3, 1, 5, 4, generator=_gen())
    before = torch.randn(6, 12, generator=_gen())
    out = before.clone()
    ops.expand(out, x, lora_b, SLOTS, 3, add)
    torch.testing.assert_close(out[:, :3], before[:, :3])
    torch.testing.assert_close(out[:, 8:], before[:, 8:])
    for row, slot in enumerate(SLOTS.tolist()):
        if slot < 0:
            want = before[row, 3:8]
        else:
            product = lora_b[slot, 0] @ x[row]
            want = before[row, 3:8] + product if add else product
        torch.testing.assert_close(out[row, 3:8], want)


@pytest.mark.parametrize("ops", PORTS, ids=lambda o: type(o).__name__)
def test_only_the_inputs_rows_are_read_from_longer_slot_buffers(ops: LoraOps) -> None:
    """vLLM's slot buffer is max_num_batched_tokens long; a step uses its first rows."""
    x = torch.randn(2, 8, generator=_gen())
    lora_a = torch.randn(2, 3, 8, generator=_gen())
    out = torch.zeros(2, 3)
    ops.shrink(out, x, lora_a, torch.tensor([0, 1, 1, 0, -1]), 1.0)
    torch.testing.assert_close(out, torch.stack([lora_a[0] @ x[0], lora_a[1] @ x[1]]))


@pytest.mark.parametrize("ops", PORTS, ids=lambda o: type(o).__name__)
def test_bf16_rows_are_computed_in_the_outputs_dtype(ops: LoraOps) -> None:
    x = torch.randn(3, 8, generator=_gen()).to(torch.bfloat16)
    lora_a = torch.randn(2, 4, 8, generator=_gen()).to(torch.bfloat16)
    out = torch.zeros(3, 4, dtype=torch.float32)
    ops.shrink(out, x, lora_a, torch.tensor([1, 0, -1]), 2.0)
    want = 2.0 * torch.stack([lora_a[1].float() @ x[0].float(), lora_a[0].float() @ x[1].float()])
    torch.testing.assert_close(out[:2], want)
    assert out.dtype == torch.float32 and not out[2].any()
