"""The NPU's choice of the Triton kernels (adapters/npu/triton_kernels.py), decided once, and
the ports on the kernels (interpreted, CPU tensors) against the torch adapters they wrap."""

from __future__ import annotations

import logging

import pytest
import torch

from adapters.container import Container
from adapters.npu import triton_kernels as tk
from adapters.npu.sampling import NpuSamplingOps
from adapters.npu.slot_mapping import NpuSlotMapping
from adapters.torch.rejection import TorchRejectionOps
from adapters.torch.slot_mapping import torch_slot_mapping
from ascend_core.triton_kernels import (
    KernelPath,
    TritonFacts,
    TritonKernelsRequest,
    decide_kernel_path,
)
from ports.device import DeviceKind, ProbeResult
from ports.rejection import Drafts
from unit.fakes.environment import FakeEnvironment
from unit.fakes.probe import FakeProbe

AUTO, OFF, INTERPRET = (
    TritonKernelsRequest.AUTO,
    TritonKernelsRequest.OFF,
    TritonKernelsRequest.INTERPRET,
)
ASCEND = TritonFacts(True, True, True)
STOCK = TritonFacts(True, False, True)
NO_TRITON = TritonFacts(False, False, False, "ModuleNotFoundError('triton')")


@pytest.mark.parametrize(
    ("request_", "facts", "path", "says"),
    [
        (AUTO, ASCEND, KernelPath.TRITON, "triton-ascend imports"),
        (AUTO, STOCK, KernelPath.TORCH, "no Ascend backend"),
        (AUTO, NO_TRITON, KernelPath.TORCH, "triton does not import (ModuleNotFoundError"),
        (AUTO, TritonFacts(True, True, False, "boom"), KernelPath.TORCH, "kernels package"),
        (OFF, ASCEND, KernelPath.TORCH, "VLLM_ASCEND_TRITON_KERNELS=off"),
        (INTERPRET, STOCK, KernelPath.INTERPRETED, "interpreter"),
        (INTERPRET, NO_TRITON, KernelPath.TORCH, "interpret, but triton does not import"),
    ],
)
def test_the_core_decides_the_path_with_its_reason(request_, facts, path, says) -> None:
    decision = decide_kernel_path(request_, facts)
    assert decision.path is path
    assert says in decision.reason


def npu_container(env: dict[str, str]) -> Container:
    c = Container()
    c.environment.override(FakeEnvironment(env))
    c.npu_probe.override(FakeProbe(ProbeResult(DeviceKind.NPU, True, "1 device")))
    c.torch_npu.override(object())
    return c


def test_stock_triton_keeps_the_torch_adapters_and_logs_why(caplog) -> None:
    c = npu_container({})
    with caplog.at_level(logging.INFO, logger="vllm.plugins.ascend"):
        assert type(c.slot_mapping()) is NpuSlotMapping
        assert type(c.sampling_ops()) is NpuSamplingOps
        assert type(c.rejection_ops()) is TorchRejectionOps
    (line,) = [r.getMessage() for r in caplog.records if "NPU kernels" in r.getMessage()]
    assert "torch (triton has no Ascend backend" in line  # once: one decision per process


def test_interpret_wraps_each_port_around_its_torch_adapter() -> None:
    c = npu_container({"VLLM_ASCEND_TRITON_KERNELS": "interpret"})
    kernels = c.npu_device.triton_kernels()
    assert kernels.decision.path is KernelPath.INTERPRETED
    assert isinstance(c.slot_mapping(), tk.TritonSlotMapping)
    assert isinstance(c.sampling_ops(), tk.TritonSamplingOps)
    assert isinstance(c.rejection_ops(), tk.TritonRejectionOps)
    assert c.npu_device.triton_kernels() is kernels


def test_off_is_the_torch_path_without_importing_triton(monkeypatch) -> None:
    monkeypatch.setattr(tk.importlib, "import_module", _refuse)
    kernels = tk.choose_triton_kernels(OFF)
    assert (kernels.enabled, kernels.decision.reason) == (False, "VLLM_ASCEND_TRITON_KERNELS=off")


def _refuse(name: str) -> None:
    raise AssertionError(f"imported {name}")


@pytest.fixture(scope="module")
def interpreted() -> tk.TritonKernels:
    kernels = tk.choose_triton_kernels(INTERPRET)
    assert kernels.enabled
    return kernels


def test_slot_mapping_on_the_kernel_is_the_torch_contract(interpreted) -> None:
    qsl = torch.tensor([0, 3, 3, 7], dtype=torch.int32)
    positions = torch.tensor([0, 1, 2, 126, 127, 128, 129], dtype=torch.int64)
    table = torch.randint(
        0, 50, (5, 6), dtype=torch.int32, generator=torch.Generator().manual_seed(1)
    )
    want = torch.full((12,), 99, dtype=torch.int64)
    got = want.clone()
    args = (7, 10, qsl, positions, table, table.stride(0))
    torch_slot_mapping(*args, want, 128, -1)
    tk.TritonSlotMapping(interpreted, NpuSlotMapping()).compute(*args, got, 128, -1)
    assert torch.equal(got, want) and interpreted.launches["slot_mapping"] >= 1


def test_rejection_on_the_kernels_is_the_torch_reference(interpreted) -> None:
    ops = tk.TritonRejectionOps(interpreted, TorchRejectionOps())  # type: ignore[arg-type]
    ref = TorchRejectionOps()
    gen = torch.Generator().manual_seed(3)
    drafts = Drafts(
        torch.tensor([1, 2, 3, -1, 4, 5], dtype=torch.int64),
        torch.tensor([3, 3, 6], dtype=torch.int32),
        3,
    )
    vocab = 9
    target = torch.rand(6, vocab, generator=gen).softmax(-1)
    inv_q = torch.empty(3, vocab).exponential_(generator=gen).reciprocal()
    recovered = ops.recover(drafts, None, target, inv_q)
    assert torch.equal(recovered, ref.recover(drafts, None, target, inv_q))
    argmax = torch.tensor([1, 2, 0, 0, 4, 5])
    bonus = torch.tensor([7, 8, 9])
    want, got = (torch.full((3, 4), -1, dtype=torch.int32) for _ in range(2))
    ref.verify_greedy(want, drafts, argmax, bonus, None)
    ops.verify_greedy(got, drafts, argmax, bonus, None)
    assert torch.equal(got, want)
    is_greedy = torch.tensor([True, False, False])
    uniform = torch.tensor([0.5, 0.5, 0.5, 0.5, 1e-6, 0.99], dtype=torch.float64)
    ref.verify_random(want, drafts, None, target, bonus, recovered, uniform, is_greedy)
    ops.verify_random(got, drafts, None, target, bonus, recovered, uniform, is_greedy)
    assert torch.equal(got, want)
    temps = torch.tensor([0.0, 0.7, 0.0])
    assert torch.equal(
        ops.expand_to_tokens(temps, drafts.cu_num_drafts, 6, 0, 1),
        ref.expand_to_tokens(temps, drafts.cu_num_drafts, 6, 0, 1),
    )
    # float64 scores (vLLM's use_fp64_gumbel): the torch adapter's, not the kernel's.
    before = interpreted.launches["rejection"]
    ops.recover(drafts, None, target.double(), inv_q.double())
    assert interpreted.launches["rejection"] == before


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("off", "torch (VLLM_ASCEND_TRITON_KERNELS=off)"),
        (None, "torch (triton has no Ascend backend"),
        ("interpret", "interpreted (VLLM_ASCEND_TRITON_KERNELS=interpret"),
        ("sometimes", "VLLM_ASCEND_TRITON_KERNELS='sometimes' is not one of auto, off, interpret"),
    ],
)
def test_the_doctors_host_facts_carry_the_kernel_path(value, says) -> None:
    c = npu_container({} if value is None else {"VLLM_ASCEND_TRITON_KERNELS": value})
    c.device_lister.override(lambda: [0])
    assert c.host_facts().triton_kernels.startswith(says)
