"""The vLLM adapter's bindings of the host GEMM, greedy sampling and slot mapping: each
calls the port the container serves (a fake here), and keeps nothing of the compute."""

from __future__ import annotations

import pytest
import torch

from adapters.container import container
from adapters.vllm.patches import host_linear, host_sampler, torch_kernels
from adapters.vllm.patches.kernel_bindings import slot_mapping_kernel
from unit.fakes.host_gemm import FakeHostGemm
from unit.fakes.sampling import FakeSamplingOps
from unit.fakes.slot_mapping import FakeSlotMapping

SLOT_KERNEL = "vllm.v1.worker.block_table:ComputeSlotMappingKernel.kernel"


def _launch_arguments() -> dict[str, object]:
    """A launch as vLLM's BlockTable.compute_slot_mapping makes it, by the kernel's names."""
    return {
        "num_tokens": 3,
        "max_num_tokens": 5,
        "query_start_loc_ptr": torch.tensor([0, 3], dtype=torch.int32),
        "positions_ptr": torch.arange(3),
        "block_table_ptr": torch.zeros(1, 4, dtype=torch.int32),
        "block_table_stride": 4,
        "slot_mapping_ptr": torch.zeros(5, dtype=torch.int64),
        "KV_CACHE_BLOCK_SIZE": 16,
        "PAD_ID": -7,
        "BLOCK_SIZE": 1024,
    }


def test_the_slot_mapping_override_is_built_on_the_served_port() -> None:
    fake = FakeSlotMapping()
    with container().slot_mapping.override(fake):
        kernel = torch_kernels.IMPLEMENTATIONS[SLOT_KERNEL](container())
    args = _launch_arguments()
    kernel(**args)
    assert fake.calls == [
        {"num_tokens": 3, "max_num_tokens": 5, "block_table_stride": 4, "block_size": 16,
         "pad_id": -7}
    ]
    assert args["slot_mapping_ptr"].tolist() == [-7] * 5  # type: ignore[attr-defined]


def test_context_parallel_slot_mapping_is_refused_by_name() -> None:
    fake = FakeSlotMapping()
    with pytest.raises(NotImplementedError, match="context parallelism"):
        slot_mapping_kernel(fake)(**_launch_arguments(), TOTAL_CP_WORLD_SIZE=2)
    assert fake.calls == []


def test_greedy_sample_is_the_ports() -> None:
    fake = FakeSamplingOps()
    logits = torch.tensor([[0.0, 3.0, 1.0], [5.0, 5.0, -1.0]])
    assert host_sampler.greedy_sample_with(fake)(logits).tolist() == [1, 0]
    assert fake.greedy_calls == [(2, 3)]


def test_the_gemm_is_the_ports_and_vllms_where_the_port_declines() -> None:
    fake = FakeHostGemm((torch.float32,))
    fallback_calls = []

    def vllms_gemm(layer, x, weight, bias=None):  # type: ignore[no-untyped-def]
        fallback_calls.append(x.dtype)
        return torch.nn.functional.linear(x, weight, bias)

    gemm = host_linear.make_host_gemm(fake, vllms_gemm)
    layer, weight, x = torch.nn.Module(), torch.eye(3), torch.ones(2, 3)
    assert torch.equal(gemm(layer, x, weight), x)
    assert fake.calls == [layer] and fallback_calls == []
    assert torch.equal(gemm(layer, x.double(), weight.double()), x.double())
    assert fallback_calls == [torch.float64]  # declined: vLLM's own GEMM ran
