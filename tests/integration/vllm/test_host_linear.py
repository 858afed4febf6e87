"""The host-GEMM port on the host (packed oneDNN): same numbers as F.linear, and vLLM's
default GEMM rebound to the port the container serves."""

from __future__ import annotations

import pytest
import torch

from adapters.container import container
from adapters.cpu import host_gemm
from adapters.vllm.patches import host_linear
from ascend_core.patches import REGISTRY
from unit.fakes.host_gemm import FakeHostGemm

F = torch.nn.functional
SPEC = next(s for s in REGISTRY if s.id == "host-onednn-linear")
GEMM = host_linear.make_host_gemm(host_gemm.CpuHostGemm(), lambda *a: F.linear(*a[1:]))

pytestmark = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="this torch has no oneDNN"
)


@pytest.fixture(autouse=True, scope="module")
def _plugin_loaded() -> None:
    """The plugin's device patches, as in every vLLM process (the host's shutdown patch
    lets the conftest's cleanup release vLLM's state on a host without an accelerator)."""
    from vllm.plugins import load_general_plugins

    load_general_plugins()


def _layer_and_weight(dtype: torch.dtype, n: int = 96, k: int = 64):  # type: ignore[no-untyped-def]
    gen = torch.Generator().manual_seed(0)
    layer = torch.nn.Module()
    weight = torch.nn.Parameter((torch.randn(n, k, generator=gen) * 0.05).to(dtype), False)
    return layer, weight, torch.randn(5, k, generator=gen).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_equals_f_linear(dtype: torch.dtype) -> None:
    if dtype not in host_gemm._supported_dtypes():
        pytest.skip("no bf16 oneDNN on this CPU")
    layer, weight, x = _layer_and_weight(dtype)
    bias = torch.randn(96).to(dtype)
    expected = F.linear(x, weight, bias)
    # float32: another kernel's summation order over 64 terms, so rounding-level apart;
    # bfloat16: F.linear already runs on oneDNN, so identical.
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 0, "rtol": 0}
    torch.testing.assert_close(GEMM(layer, x, weight, bias), expected, **tol)
    torch.testing.assert_close(GEMM(layer, x[None], weight)[0], F.linear(x, weight), **tol)


def test_packs_once_and_again_after_the_weight_changes() -> None:
    layer, weight, x = _layer_and_weight(torch.float32)
    first = host_gemm.packed_weight(layer, weight)
    assert host_gemm.packed_weight(layer, weight) is first
    with torch.no_grad():
        weight.mul_(2)  # an in-place reload bumps the version counter
    assert host_gemm.packed_weight(layer, weight) is not first
    torch.testing.assert_close(GEMM(layer, x, weight), F.linear(x, weight), atol=1e-5, rtol=1e-5)
    other = torch.nn.Parameter(weight.detach().clone(), False)  # rebinding the parameter
    assert host_gemm.packed_weight(layer, other) is not host_gemm.packed_weight(layer, weight)


def test_other_dtypes_and_shapes_fall_back() -> None:
    calls = []
    gemm = host_linear.make_host_gemm(
        host_gemm.CpuHostGemm(), lambda *a: calls.append(a) or "fallback"
    )
    layer, weight, x = _layer_and_weight(torch.float32)
    assert gemm(layer, x.half(), weight.half()) == "fallback"  # dtype not packed
    assert gemm(layer, x.double(), weight) == "fallback"  # mixed dtypes
    assert gemm(layer, x, weight[None]) == "fallback"  # not a 2-D weight
    assert len(calls) == 3


def test_a_port_that_serves_nothing_leaves_vllms_gemm(monkeypatch: pytest.MonkeyPatch) -> None:
    import vllm.model_executor.layers.utils as utils

    current = utils.default_unquantized_gemm
    original = getattr(current, "__wrapped__", current)
    monkeypatch.setattr(utils, "default_unquantized_gemm", original)  # restored afterwards
    serves_nothing = FakeHostGemm(())  # a torch without oneDNN
    with container().host_gemm.override(serves_nothing):
        host_linear.use_onednn_gemm(SPEC)
    assert utils.default_unquantized_gemm is original  # F.linear stays
    assert serves_nothing.packed == [] and serves_nothing.calls == []


def test_the_patch_makes_vllms_dispatch_return_the_host_gemm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import vllm.model_executor.layers.utils as utils
    from vllm.platforms import current_platform

    if current_platform.is_cpu() or current_platform.is_cuda_alike():
        pytest.skip("vLLM picks its own GEMM on this platform")
    current = utils.default_unquantized_gemm  # patched already when the plugin loaded
    original = getattr(current, "__wrapped__", current)
    monkeypatch.setattr(utils, "default_unquantized_gemm", original)  # restored afterwards
    host_linear.use_onednn_gemm(SPEC)
    gemm = utils.dispatch_unquantized_gemm()
    assert gemm.__ascend_patch__ == SPEC.id
    assert host_linear._in_place == [container().host_gemm()]  # the port prepack asks
    assert gemm.__wrapped__ is original
    host_linear.use_onednn_gemm(SPEC)  # re-entrant: not wrapped twice
    assert utils.dispatch_unquantized_gemm() is gemm
    layer, weight, x = _layer_and_weight(torch.float32)
    torch.testing.assert_close(gemm(layer, x, weight), F.linear(x, weight), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_under_torch_compile_the_gemm_is_one_op_with_the_same_numbers(dtype: torch.dtype) -> None:
    """Dynamo cannot trace the packing; the compiled graph calls ascend_host::packed_linear,
    which packs on its first run and again after the weight changes in place."""
    if dtype not in host_gemm._supported_dtypes():
        pytest.skip("no bf16 oneDNN on this CPU")
    from torch._dynamo.testing import CompileCounterWithBackend

    layer, weight, x = _layer_and_weight(dtype)
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(lambda a: GEMM(layer, a, weight), backend=counter, fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), F.linear(x, weight), rtol=2e-2, atol=1e-5)
        graph = counter.graphs[0].code
        # the Python op, or the native one once prepack_weights found it built
        assert "ascend_host.packed_linear" in graph or "ascend_host_native.packed_linear" in graph
        weight.mul_(2.0)
        torch.testing.assert_close(compiled(x), F.linear(x, weight), rtol=2e-2, atol=1e-5)
    assert counter.frame_count == 1
