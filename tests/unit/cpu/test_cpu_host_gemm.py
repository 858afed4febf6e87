"""The host-GEMM port on the host against real torch: oneDNN's packed GEMM with the
native build absent (handed in as absent: no compiler runs here)."""

from __future__ import annotations

import pytest
import torch

from adapters.cpu import host_gemm
from adapters.cpu.host_gemm import CpuHostGemm
from ports.host_gemm import HostGemm

F = torch.nn.functional

pytestmark = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="this torch has no oneDNN"
)


def _gemm() -> CpuHostGemm:
    return CpuHostGemm(native_ops=lambda: (None, None))


def _layer(n: int = 24, k: int = 16) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(n)
    weight = torch.nn.Parameter(torch.randn(n, k, generator=gen) * 0.1, requires_grad=False)
    return torch.nn.Module(), weight, torch.randn(3, k, generator=gen)


def test_serves_float32_with_f_linears_numbers() -> None:
    gemm = _gemm()
    assert isinstance(gemm, HostGemm) and torch.float32 in gemm.dtypes()
    layer, weight, x = _layer()
    bias = torch.randn(24)
    out = gemm.linear(layer, x, weight, bias)
    assert out is not None
    torch.testing.assert_close(out, F.linear(x, weight, bias), atol=1e-5, rtol=1e-5)


def test_declines_what_it_does_not_pack() -> None:
    gemm = _gemm()
    layer, weight, x = _layer()
    assert gemm.linear(layer, x.half(), weight.half(), None) is None  # dtype not packed
    assert gemm.linear(layer, x.double(), weight, None) is None  # mixed dtypes
    assert gemm.linear(layer, x, weight[None], None) is None  # not a 2-D weight
    assert gemm.linear(layer, x, weight, torch.zeros(24, dtype=torch.float64)) is None


def test_prepack_packs_the_weights_it_serves_in_order_with_a_plain_alias() -> None:
    gemm = _gemm()
    (a, wa, x), (b, wb, _) = _layer(), _layer(8)
    c = torch.nn.Module()
    assert gemm.prepack([(a, wa), (c, wa.half()), (b, wb)]) == 2
    plain = getattr(a, host_gemm._PLAIN)
    assert type(plain) is torch.Tensor and plain.data_ptr() == wa.data_ptr()
    assert not hasattr(c, host_gemm._PLAIN)
    packed = host_gemm.packed_weight(a, wa)
    assert host_gemm.packed_weight(a, wa) is packed  # packed once
    with torch.no_grad():
        wa.mul_(2)  # an in-place reload reaches the alias and repacks
    assert host_gemm.packed_weight(a, wa) is not packed
    out = gemm.linear(a, x, wa, None)
    assert out is not None
    torch.testing.assert_close(out, F.linear(x, wa), atol=1e-5, rtol=1e-5)
