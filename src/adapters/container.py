"""The composition root: which adapter serves each port, decided once per process.

Tests override providers (`with container.environment.override(fake): ...`)
instead of patching modules. Device adapters are named by path and imported only
when first asked for: the host adapters import torch, the NPU ones need torch_npu,
and the probe and the doctor must work where `import torch` itself fails.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from adapters.system.lean_imports import DEPENDENCY_INJECTOR_EXTRAS, without_modules

with without_modules(DEPENDENCY_INJECTOR_EXTRAS):  # its optional integrations: unused here
    from dependency_injector import containers, providers

from adapters.npu.probe import CANN_LIBRARIES, CannLibraryFinder, DavinciDeviceLister, NpuProbe
from adapters.system.environment import OsEnvironment
from ascend_core.chip import served_chip_family
from ascend_core.device_selection import DeviceDecision, select_device
from ascend_core.env_registry import EnvSettings, read_env
from ports.device import ChipFamily, DeviceKind, DeviceProbe

if TYPE_CHECKING:
    from ports.runtime import DeviceRuntime


def _decide(settings: EnvSettings, npu_probe: DeviceProbe) -> DeviceDecision:
    return select_device(settings.device, npu_probe.probe())


def _serving_kind(decision: DeviceDecision) -> str:
    if decision.kind is None:
        # Device adapters are asked for only once the platform was activated.
        raise RuntimeError(f"no device serves: {decision.reason}")
    return decision.kind.value


def _serving_chip(decision: DeviceDecision, runtime: Callable[[], DeviceRuntime]) -> ChipFamily:
    if decision.kind is not DeviceKind.NPU:
        return ChipFamily.HOST
    return served_chip_family(runtime().device_name(0))


def _lazy(target: str, *args: Any) -> Any:
    """Build `module:Class`(*args) (or call `module:function`), importing the module only
    now (it imports torch, or is only the doctor's)."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)(*args)


class HostDevice(containers.DeclarativeContainer):
    """The host device: adapters.cpu's ops, runtime and gloo communicator."""

    ops = providers.Singleton(_lazy, "adapters.cpu.ops:CpuOps")
    quant_ops = providers.Singleton(_lazy, "adapters.cpu.quant:CpuQuantOps")
    weight_quant_ops = providers.Singleton(_lazy, "adapters.cpu.weight_quant:CpuWeightQuantOps")
    moe_ops = providers.Singleton(_lazy, "adapters.cpu.moe:CpuMoeOps")
    quant_moe_ops = providers.Singleton(_lazy, "adapters.cpu.quant_moe:CpuQuantMoeOps")
    int4_weight_ops = providers.Singleton(_lazy, "adapters.cpu.quant_w4a16:CpuInt4WeightOps")
    int4_expert_ops = providers.Singleton(
        _lazy, "adapters.cpu.quant_w4a16_moe:CpuInt4ExpertOps"
    )
    w4a8_linear_ops = providers.Singleton(_lazy, "adapters.cpu.quant_w4a8:CpuW4A8LinearOps")
    mla_ops = providers.Singleton(_lazy, "adapters.cpu.mla:CpuMlaOps")
    sparse_mla_ops = providers.Singleton(_lazy, "adapters.cpu.sparse_mla:CpuSparseMlaOps")
    sampling_ops = providers.Singleton(_lazy, "adapters.cpu.sampling:CpuSamplingOps")
    slot_mapping = providers.Singleton(_lazy, "adapters.cpu.slot_mapping:CpuSlotMapping")
    host_gemm = providers.Singleton(_lazy, "adapters.cpu.host_gemm:CpuHostGemm")
    rejection_ops = providers.Singleton(_lazy, "adapters.torch.rejection:TorchRejectionOps")
    draft_input_ops = providers.Singleton(_lazy, "adapters.torch.draft_inputs:TorchDraftInputOps")
    lora_ops = providers.Singleton(_lazy, "adapters.torch.lora:TorchLoraOps")
    linear_attention_ops = providers.Singleton(
        _lazy, "adapters.torch.linear_attention:TorchLinearAttentionOps"
    )
    runtime = providers.Singleton(_lazy, "adapters.cpu.runtime:CpuRuntime")
    sleep_memory = providers.Singleton(_lazy, "adapters.cpu.sleep:CpuSleepMemory")
    communicator = providers.Singleton(_lazy, "adapters.cpu.communicator:GlooCommunicator")
    profiler = providers.Singleton(_lazy, "adapters.cpu.profiler:HostProfiler")


class NpuDevice(containers.DeclarativeContainer):
    """An NPU: adapters.npu's ops and runtime on the torch_npu module injected, and HCCL.

    A stand-in torch_npu (the emulated one in tests) is injected here; HCCL comes with
    CANN, so the emulator also overrides the communicator (gloo) where there is none.
    """

    torch_npu = providers.Dependency()
    # VLLM_ASCEND_TRITON_KERNELS and the host's Triton decide, once, whether the slot
    # mapping, top-k/top-p and rejection sampler launch kernels/triton (adapters/npu/
    # triton_kernels.py); the torch adapters below serve otherwise and as fallback.
    env_settings = providers.Dependency()
    triton_kernels = providers.Singleton(
        _lazy, "adapters.npu.triton_kernels:triton_kernels_from", env_settings
    )
    ops = providers.Singleton(_lazy, "adapters.npu.ops:NpuOps", torch_npu)
    quant_ops = providers.Singleton(_lazy, "adapters.npu.quant:NpuQuantOps", torch_npu)
    weight_quant_ops = providers.Singleton(
        _lazy, "adapters.npu.weight_quant:NpuWeightQuantOps", torch_npu
    )
    moe_ops = providers.Singleton(_lazy, "adapters.npu.moe:NpuMoeOps", torch_npu)
    quant_moe_ops = providers.Singleton(_lazy, "adapters.npu.quant_moe:NpuQuantMoeOps", torch_npu)
    int4_weight_ops = providers.Singleton(
        _lazy, "adapters.npu.quant_w4a16:NpuInt4WeightOps", torch_npu
    )
    int4_expert_ops = providers.Singleton(
        _lazy, "adapters.npu.quant_w4a16_moe:NpuInt4ExpertOps", torch_npu
    )
    w4a8_linear_ops = providers.Singleton(
        _lazy, "adapters.npu.quant_w4a8:NpuW4A8LinearOps", torch_npu
    )
    moe_comm_ops = providers.Singleton(
        _lazy, "adapters.npu.moe_comm:NpuMoeComm", torch_npu, moe_ops, quant_moe_ops
    )
    mla_ops = providers.Singleton(_lazy, "adapters.npu.mla:NpuMlaOps", torch_npu)
    sparse_mla_ops = providers.Singleton(
        _lazy, "adapters.npu.sparse_mla:NpuSparseMlaOps", torch_npu
    )
    # Plain torch on the device's tensors: no torch_npu asked for.
    torch_sampling_ops = providers.Singleton(_lazy, "adapters.npu.sampling:NpuSamplingOps")
    torch_slot_mapping = providers.Singleton(_lazy, "adapters.npu.slot_mapping:NpuSlotMapping")
    torch_rejection_ops = providers.Singleton(
        _lazy, "adapters.torch.rejection:TorchRejectionOps"
    )
    sampling_ops = providers.Singleton(
        _lazy,
        "adapters.npu.triton_kernels:with_triton_sampling",
        triton_kernels,
        torch_sampling_ops,
    )
    slot_mapping = providers.Singleton(
        _lazy,
        "adapters.npu.triton_kernels:with_triton_slot_mapping",
        triton_kernels,
        torch_slot_mapping,
    )
    rejection_ops = providers.Singleton(
        _lazy,
        "adapters.npu.triton_kernels:with_triton_rejection",
        triton_kernels,
        torch_rejection_ops,
    )
    lora_ops = providers.Singleton(_lazy, "adapters.torch.lora:TorchLoraOps")
    linear_attention_ops = providers.Singleton(
        _lazy, "adapters.npu.linear_attention:NpuLinearAttentionOps", torch_npu
    )
    draft_input_ops = providers.Singleton(
        _lazy, "adapters.torch.draft_inputs:TorchDraftInputOps"
    )
    runtime = providers.Singleton(_lazy, "adapters.npu.runtime:NpuRuntime", torch_npu)
    # Sleep mode: the pool that keeps addresses (adapters/npu/vmm_pool.py), its native
    # allocator built once against the CANN the finder sees (the emulator injects its own).
    cann_library_finder = providers.Dependency()
    sleep_pool_library = providers.Singleton(
        _lazy, "adapters.npu.vmm_pool:build_vmm_pool_library", cann_library_finder
    )
    sleep_memory = providers.Singleton(
        _lazy, "adapters.npu.sleep:npu_sleep_memory", torch_npu, sleep_pool_library
    )
    communicator = providers.Singleton(_lazy, "adapters.npu.collective:HcclCommunicator")
    profiler = providers.Singleton(_lazy, "adapters.npu.profiler:NpuProfiler", torch_npu)


class Container(containers.DeclarativeContainer):
    """Production wiring; one instance per process (see `container()`)."""

    # Driven ports: the world outside, as the core sees it.
    environment = providers.Singleton(OsEnvironment)
    # Named by path too: registration, in every vLLM process, asks only for the device
    # decision below (the environment, its settings, the NPU probe).
    upstream = providers.Singleton(_lazy, "adapters.system.upstream:MetadataUpstream", environment)
    # model_files(directory)
    model_files = providers.Factory(_lazy, "adapters.system.model_files:LocalModelFiles")
    # CPUs this process may use
    host_cpus = providers.Callable(_lazy, "adapters.system.cpus:usable_cpus")
    # Whether files additional_config names exist on this machine
    local_files = providers.Singleton(_lazy, "adapters.system.local_files:OsLocalFiles")
    # A Ray cluster: its nodes (the doctor's placement check), a Ray worker's devices
    ray_cluster = providers.Singleton(_lazy, "adapters.system.ray_cluster:RayClusterClient")

    # What the host holds, looked up once for the probe and the doctor alike.
    cann_library_finder = providers.Singleton(CannLibraryFinder, environment)
    device_lister = providers.Singleton(DavinciDeviceLister)

    env_settings = providers.Singleton(read_env, environment)
    # torch_npu, loaded only when first asked for; one sub-container per device (the NPU's
    # on that torch_npu), of which the decision below selects one, once per process.
    torch_npu = providers.Singleton(_lazy, "adapters.npu.loader:load_torch_npu")
    host_device = providers.Container(HostDevice)
    npu_device = providers.Container(
        NpuDevice,
        torch_npu=torch_npu,
        env_settings=env_settings,
        cann_library_finder=cann_library_finder,
    )
    npu_runtime = npu_device.runtime

    # Probes and the device decision (the core decides; probes only look).
    # The probe only looks (no torch_npu import: it decides in every vLLM process, the
    # API server's too); the chip is read once torch_npu serves (serving_chip below).
    npu_probe = providers.Singleton(
        NpuProbe, environment, find_library=cann_library_finder, list_devices=device_lister
    )
    device_decision = providers.Singleton(_decide, env_settings, npu_probe)

    # Device adapters, selected by the decision.
    serving_kind = providers.Callable(_serving_kind, device_decision)
    ops = providers.Selector(serving_kind, npu=npu_device.ops, cpu=host_device.ops)
    # Op roles beyond the dense ones (ports/moe.py, ports/mla.py, ports/quant.py,
    # ports/quant_moe.py).
    moe_ops = providers.Selector(serving_kind, npu=npu_device.moe_ops, cpu=host_device.moe_ops)
    mla_ops = providers.Selector(serving_kind, npu=npu_device.mla_ops, cpu=host_device.mla_ops)
    # DSA's indexer and sparse latent attention (ports/sparse_mla.py).
    sparse_mla_ops = providers.Selector(
        serving_kind, npu=npu_device.sparse_mla_ops, cpu=host_device.sparse_mla_ops
    )
    quant_ops = providers.Selector(
        serving_kind, npu=npu_device.quant_ops, cpu=host_device.quant_ops
    )
    quant_moe_ops = providers.Selector(
        serving_kind, npu=npu_device.quant_moe_ops, cpu=host_device.quant_moe_ops
    )
    # W4A16 weight-only linears (ports/quant_w4a16.py).
    int4_weight_ops = providers.Selector(
        serving_kind, npu=npu_device.int4_weight_ops, cpu=host_device.int4_weight_ops
    )
    # W4A16 MoE experts (ports/quant_w4a16_moe.py).
    int4_expert_ops = providers.Selector(
        serving_kind, npu=npu_device.int4_expert_ops, cpu=host_device.int4_expert_ops
    )
    # W4A8_DYNAMIC linears (ports/quant_w4a8.py).
    w4a8_linear_ops = providers.Selector(
        serving_kind, npu=npu_device.w4a8_linear_ops, cpu=host_device.w4a8_linear_ops
    )
    # Weight-only int8 linears (ports/weight_quant.py).
    weight_quant_ops = providers.Selector(
        serving_kind, npu=npu_device.weight_quant_ops, cpu=host_device.weight_quant_ops
    )
    # Expert parallelism's token exchange (ports/moe_comm.py): the NPU's MC2, all-to-all
    # and all-gather; the host has none (its EP adds the ranks' partial sums in vLLM's
    # all-reduce).
    moe_comm_ops = providers.Selector(
        serving_kind, npu=npu_device.moe_comm_ops, cpu=providers.Object(None)
    )
    # Sampling (ports/sampling.py) and the step's KV-cache slots (ports/slot_mapping.py).
    sampling_ops = providers.Selector(
        serving_kind, npu=npu_device.sampling_ops, cpu=host_device.sampling_ops
    )
    slot_mapping = providers.Selector(
        serving_kind, npu=npu_device.slot_mapping, cpu=host_device.slot_mapping
    )
    # The host GEMM (ports/host_gemm.py), the host's alone: an NPU's linear layers keep
    # vLLM's GEMM on the device.
    host_gemm = host_device.host_gemm
    # Speculative decoding's draft verification (ports/rejection.py).
    rejection_ops = providers.Selector(
        serving_kind, npu=npu_device.rejection_ops, cpu=host_device.rejection_ops
    )
    # Draft-model speculation's input bookkeeping (ports/draft_inputs.py).
    draft_input_ops = providers.Selector(
        serving_kind, npu=npu_device.draft_input_ops, cpu=host_device.draft_input_ops
    )
    # LoRA's shrink and expand (ports/lora.py), for vLLM's LoRA layers.
    lora_ops = providers.Selector(serving_kind, npu=npu_device.lora_ops, cpu=host_device.lora_ops)
    # Linear attention's convolution and gated delta rule (ports/linear_attention.py).
    linear_attention_ops = providers.Selector(
        serving_kind, npu=npu_device.linear_attention_ops, cpu=host_device.linear_attention_ops
    )
    runtime = providers.Selector(serving_kind, npu=npu_runtime, cpu=host_device.runtime)
    # Sleep mode's release and restore of weights and KV cache (ports/sleep.py).
    sleep_memory = providers.Selector(
        serving_kind, npu=npu_device.sleep_memory, cpu=host_device.sleep_memory
    )
    # The chip family, read once from the serving runtime (torch_npu's device name).
    serving_chip = providers.Singleton(_serving_chip, device_decision, runtime.provider)
    communicator = providers.Selector(
        serving_kind, npu=npu_device.communicator, cpu=host_device.communicator
    )
    # vLLM's profiler hooks (ports/profiler.py): torch's profiler or torch_npu's.
    profiler = providers.Selector(serving_kind, npu=npu_device.profiler, cpu=host_device.profiler)

    # The doctor: host facts for `check`, vLLM's own `vllm serve` parser for `plan`. Named
    # by path: serving never asks for them, and their imports (the preflight checks)
    # would add to every vLLM start (scripts/bench_startup.py).
    # The NPU's kernel path as the doctor reports it (imports triton, not torch).
    triton_kernel_path = providers.Callable(
        _lazy, "adapters.npu.triton_kernels:describe_kernel_path", environment
    )
    host_facts = providers.Singleton(
        _lazy,
        "adapters.doctor.host:gather_host_facts",
        cann_library_finder,
        device_lister,
        CANN_LIBRARIES,
        triton_kernel_path.provider,
    )
    serve_args_parser = providers.Singleton(_lazy, "adapters.doctor.serve_args:vllm_parser")
    # The system's shared libraries (Mooncake's libibverbs, for `check`).
    system_libraries = providers.Singleton(
        _lazy, "adapters.system.shared_libraries:LoaderLibraries", environment
    )


_CONTAINER: Container | None = None


def container() -> Container:
    """The process's container, built on first use (vLLM loads plugins in every process)."""
    global _CONTAINER
    if _CONTAINER is None:
        _CONTAINER = Container()
    return _CONTAINER
