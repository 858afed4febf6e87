"""The top-k/top-p Triton kernel under the interpreter, against vLLM's torch sampler ops.

Rows of one launch carry the edge cases (k=1, k=V, p=1, tiny p, ties, -inf pads); the
vocabulary (67) is not a multiple of the tile (32), so every pass has a masked tail.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest
import torch
from kernels.triton import load_interpreted

pytestmark = pytest.mark.vllm

VOCAB = 45
Reference = Callable[..., torch.Tensor]
TILE = 32


@pytest.fixture(scope="module")
def kernel() -> ModuleType:
    return load_interpreted("kernels.triton.topk_topp")


@pytest.fixture(scope="module")
def reference() -> Callable[..., torch.Tensor]:
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch

    return apply_top_k_top_p_pytorch


def logits_rows(n: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, VOCAB, generator=gen) * 3
    x[1, 40:] = float("-inf")  # a row with masked (padded) vocabulary entries
    return x


def compare(
    kernel: ModuleType,
    reference: Reference,
    x: torch.Tensor,
    k: torch.Tensor | None,
    p: torch.Tensor | None,
) -> None:
    ours = kernel.apply_top_k_top_p(x.clone(), k, p, block=TILE)
    want = reference(x.clone(), k, p)
    # Kept logits are untouched, masked ones are -inf: the tensors are equal.
    assert torch.equal(ours, want), (
        f"kept per row: ours {(ours > float('-inf')).sum(1).tolist()}, "
        f"vLLM {(want > float('-inf')).sum(1).tolist()}"
    )


def test_top_k_only(kernel: ModuleType, reference: Reference) -> None:
    k = torch.tensor([1, 5, VOCAB, VOCAB - 1, 20, 2], dtype=torch.int32)
    compare(kernel, reference, logits_rows(6, 1), k, None)


def test_top_p_only(kernel: ModuleType, reference: Reference) -> None:
    p = torch.tensor([1.0, 0.5, 0.9, 0.01, 0.999, 0.3])
    compare(kernel, reference, logits_rows(6, 2), None, p)


def test_top_k_then_top_p(kernel: ModuleType, reference: Reference) -> None:
    k = torch.tensor([1, 5, VOCAB, 30, 3, 20], dtype=torch.int64)
    p = torch.tensor([0.5, 1.0, 0.8, 0.95, 0.2, 0.6])
    compare(kernel, reference, logits_rows(6, 3), k, p)


def test_ties_at_the_top_k_threshold_are_all_kept(kernel: ModuleType, reference: Reference) -> None:
    gen = torch.Generator().manual_seed(4)
    x = torch.randint(-4, 5, (4, VOCAB), generator=gen).float()  # 9 values: many ties
    x[0, :] = 2.0  # all equal
    k = torch.tensor([1, 7, 30, 1], dtype=torch.int32)
    compare(kernel, reference, x, k, None)


def test_ties_at_the_top_p_threshold_go_together(kernel: ModuleType, reference: Reference) -> None:
    # The reference's sort splits a tie at the threshold arbitrarily; the kernel keeps or
    # masks a tied value whole. Where they differ, it is only inside that tied value.
    gen = torch.Generator().manual_seed(5)
    x = torch.randint(-3, 4, (4, VOCAB), generator=gen).float()
    p = torch.tensor([0.5, 0.9, 0.2, 1.0])
    ours = kernel.apply_top_k_top_p(x.clone(), None, p, block=TILE)
    want = reference(x.clone(), None, p)
    kept_ours, kept_want = ours > float("-inf"), want > float("-inf")
    assert bool((kept_ours | ~kept_want).all()), "the kernel masked a logit vLLM keeps"
    for row in range(x.shape[0]):
        extra = x[row][kept_ours[row] & ~kept_want[row]]
        tie = x[row][kept_want[row]].min()
        assert bool((extra == tie).all()), f"row {row}: extra kept {extra.tolist()} not {tie}"
        # ... and the whole tied value is kept.
        assert bool(kept_ours[row][x[row] == tie].all())


def test_no_k_and_no_p_leaves_logits_alone(kernel: ModuleType) -> None:
    x = logits_rows(2, 6)
    assert torch.equal(kernel.apply_top_k_top_p(x.clone(), None, None), x)


def test_top_k_top_p_masks_float32_and_hands_other_dtypes_back() -> None:
    """The sampling port on the kernels (the NPU adapter's TritonSamplingOps, interpreted):
    float32 logits masked in place by the kernel; bf16 handed back (vLLM's torch path).
    (Here, not in tests/unit: the kernel's 32 interpreted reduction passes take seconds.)"""
    from adapters.npu import triton_kernels as tk
    from adapters.npu.sampling import NpuSamplingOps
    from ascend_core.triton_kernels import TritonKernelsRequest

    interpreted = tk.choose_triton_kernels(TritonKernelsRequest.INTERPRET)
    assert interpreted.enabled
    ops = tk.TritonSamplingOps(interpreted, NpuSamplingOps())
    logits = torch.tensor([[1.0, 4.0, 3.0, 2.0], [0.5, 0.25, 0.125, 0.75]])
    masked = ops.top_k_top_p(logits, torch.tensor([2, 4]), None)
    inf = float("-inf")
    assert masked is logits
    assert logits.tolist() == [[inf, 4.0, 3.0, inf], [0.5, 0.25, 0.125, 0.75]]
    # bf16 logits: the torch adapter has no kernel, so the caller keeps vLLM's torch path.
    assert ops.top_k_top_p(logits.to(torch.bfloat16), torch.tensor([1, 1]), None) is None
    assert ops.greedy(torch.tensor([[0.0, 2.0, 1.0]])).tolist() == [1]
