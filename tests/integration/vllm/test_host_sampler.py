"""The host's greedy sampling: the native argmax gives torch.argmax's answer, and the
patch puts the sampling port the container serves where vLLM's sampler looks."""

from __future__ import annotations

import pytest
import torch
from vllm.v1.sample.sampler import Sampler

from adapters.container import container
from adapters.cpu import native
from adapters.vllm.patches import host_sampler
from ascend_core.patches import REGISTRY
from support.native_kernels import built_or_skip
from unit.fakes.sampling import FakeSamplingOps

SPEC = next(s for s in REGISTRY if s.id == "host-greedy-argmax")


@pytest.fixture(scope="module")
def kernel():  # type: ignore[no-untyped-def]
    return built_or_skip(native.greedy_argmax(), "greedy argmax", "torch.argmax")


def _hard_rows() -> torch.Tensor:
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(9, 1000, generator=gen)
    x[1, 700] = x[1, 20] = 50.0  # a tie: the first
    x[2, 900] = float("nan")
    x[2, 10] = float("inf")  # NaN beats +inf: torch treats NaN as the maximum
    x[3] = float("-inf")  # all -inf: index 0
    x[4, 999] = 1e30  # the last
    x[5, 0] = 1e30  # the first
    x[6, 400] = float("nan")
    x[6, 300] = float("nan")  # the first NaN
    return x


@pytest.mark.parametrize("rows", [1, 2, 16, 64])
def test_the_native_argmax_is_torchs(kernel, rows: int) -> None:  # type: ignore[no-untyped-def]
    x = torch.randn(rows, 8192, generator=torch.Generator().manual_seed(rows))
    assert torch.equal(kernel(x), x.argmax(dim=-1))
    hard = _hard_rows()
    assert torch.equal(kernel(hard), hard.argmax(dim=-1))
    strided = torch.randn(rows, 2 * 333)[:, ::2].contiguous()[:, :300]  # rows with a stride
    assert torch.equal(kernel(strided), strided.argmax(dim=-1))


@pytest.mark.parametrize("n", [1, 15, 16, 17, 63, 64, 65, 130, 8193])
def test_the_native_argmax_is_torchs_at_every_vector_edge(kernel, n: int) -> None:  # type: ignore[no-untyped-def]
    """Lengths around the kernel's 16- and 64-value steps, each special value placed at
    every kind of position: ties of small integers (the first wins), a NaN, +inf, +0 among
    -0 and -0 among +0 (equal: the first), all -inf."""
    gen = torch.Generator().manual_seed(n)
    for j in sorted({0, n // 2, n - 1, min(n - 1, 63), min(n - 1, 64)}):
        x = torch.randint(-3, 3, (7, n), generator=gen).float()
        x[1] = float("-inf")
        x[2, j] = float("nan")
        x[3, j] = float("inf")
        x[4] = -0.0
        x[4, j] = 0.0
        x[5] = 0.0
        x[5, j] = -0.0
        assert torch.equal(kernel(x), x.argmax(dim=-1)), (n, j)


def test_what_it_does_not_take_is_an_error(kernel) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(RuntimeError, match="takes float32 logits"):
        kernel(torch.randn(2, 8).to(torch.bfloat16))


def _unpatched():  # type: ignore[no-untyped-def]
    saved = Sampler.__dict__["greedy_sample"]
    original = saved.__func__
    return saved, getattr(original, "__wrapped__", original)  # unpatched, if the plugin loaded


def test_the_patched_sampler_takes_it_and_torch_serves_the_rest(kernel) -> None:  # type: ignore[no-untyped-def]
    saved, original = _unpatched()
    try:
        Sampler.greedy_sample = staticmethod(original)  # type: ignore[method-assign]
        host_sampler.use_native_greedy_argmax(SPEC)
        patched = Sampler.greedy_sample
        assert patched.__ascend_patch__ == SPEC.id  # type: ignore[attr-defined]
        host_sampler.use_native_greedy_argmax(SPEC)  # re-entrant
        assert Sampler.greedy_sample is patched
        hard = _hard_rows()
        assert torch.equal(Sampler.greedy_sample(hard), hard.argmax(dim=-1))
        half = hard.to(torch.bfloat16)  # not the kernel's: torch's argmax, same shape
        assert torch.equal(Sampler.greedy_sample(half), half.argmax(dim=-1).view(-1))
    finally:
        Sampler.greedy_sample = saved  # type: ignore[method-assign]


def test_the_patched_sampler_asks_the_port_the_container_serves() -> None:
    saved, original = _unpatched()
    fake = FakeSamplingOps()
    try:
        Sampler.greedy_sample = staticmethod(original)  # type: ignore[method-assign]
        with container().sampling_ops.override(fake):
            host_sampler.use_native_greedy_argmax(SPEC)
        logits = torch.randn(3, 5)
        assert torch.equal(Sampler.greedy_sample(logits), logits.argmax(dim=-1))
        assert fake.greedy_calls == [(3, 5)]
    finally:
        Sampler.greedy_sample = saved  # type: ignore[method-assign]
