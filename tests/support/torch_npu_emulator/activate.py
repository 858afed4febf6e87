"""Wire the emulated torch_npu into this process's container (test support, not product).

One function for every process that must see the emulated NPU: the test's own process
(generate_run.py) and every Python process vLLM starts from it, through the
`sitecustomize` in tests/support/emulated_npu_site (put on PYTHONPATH by `child_env`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

SITE_DIR = Path(__file__).resolve().parents[1] / "emulated_npu_site"
TESTS_DIR = Path(__file__).resolve().parents[2]
# Test-support switches (not the plugin's: the plugin reads only VLLM_ASCEND_*).
ACTIVE_VAR = "EMULATED_NPU"  # "1" in a process that must start with the emulator wired
SOC_VAR = "EMULATED_NPU_SOC"
DEVICES_VAR = "EMULATED_NPU_DEVICES"
MEMORY_VAR = "EMULATED_NPU_MEMORY"  # bytes per emulated device
# "1": triton-ascend's driver presented as active, as on an NPU host (triton_driver.py)
TRITON_VAR = "EMULATED_NPU_TRITON"
DEFAULT_MEMORY = 64 << 30

_ACTIVE: Any = None


class AvailableNpuProbe:
    """The NPU probe's answer on a host where the emulated torch_npu stands in."""

    def __init__(
        self, soc_name: str, device_count: int, memory_bytes: int = DEFAULT_MEMORY
    ) -> None:
        from ascend_core.chip import chip_family_from_soc
        from ports.device import ChipFamily, DeviceFacts, DeviceKind, ProbeResult

        family = chip_family_from_soc(soc_name) or ChipFamily.A2
        self.result = ProbeResult(
            DeviceKind.NPU,
            True,
            f"emulated torch_npu (tests): {device_count} x {soc_name} on the emulated npu "
            "device (host memory)",
            facts=DeviceFacts(DeviceKind.NPU, family, device_count, memory_bytes, soc_name),
        )

    def probe(self) -> Any:
        return self.result


def activate(
    soc_name: str = "Ascend910B1",
    device_count: int = 1,
    memory_bytes: int = DEFAULT_MEMORY,
    triton_driver: bool = False,
) -> Any:
    """Inject the emulated torch_npu into the container's NPU wiring; returns it.

    Idempotent per process. The emulated `npu` device is installed (torch.npu, tensors
    of device type npu in host memory); the NPU container's runtime and ops then run on
    it unchanged. Only the communicator differs: HCCL exists only with torch_npu and
    CANN, so ranks reduce over gloo through host memory (collective.py: inside a graph
    capture each collective is recorded, as HCCL's are, and replayed).

    triton_driver: triton-ascend's driver presented as active (triton_driver.py), so
    vLLM's HAS_TRITON says yes as on an NPU host; done first, before vLLM is imported.
    """
    global _ACTIVE
    if _ACTIVE is not None:
        return _ACTIVE
    if triton_driver:
        from support.torch_npu_emulator.triton_driver import present

        present()
    from adapters.container import container
    from support.torch_npu_emulator import make_torch_npu
    from support.torch_npu_emulator.collective import CapturableGlooCommunicator

    torch_npu = make_torch_npu(soc_name=soc_name, device_count=device_count)
    torch_npu.npu.total_memory = memory_bytes
    ext = torch_npu.npu.device()  # install the emulated device: `npu` tensors from here on
    c = container()
    # Sleep mode's allocator (src/adapters/npu/native/vmm_pool.cpp) is built into the
    # emulated device, against its emulated ACL.
    from adapters.npu.vmm_pool import VmmPoolLibrary

    c.npu_device.sleep_pool_library.override(
        VmmPoolLibrary(ext.__file__, "built into the emulated device, against its ACL")
    )
    c.npu_probe.override(AvailableNpuProbe(soc_name, device_count, memory_bytes))
    c.torch_npu.override(torch_npu)  # the NPU sub-container, with this torch_npu
    c.npu_device.communicator.override(CapturableGlooCommunicator())  # no HCCL without CANN
    from support.torch_npu_emulator import hccl_comm

    hccl_comm.install(soc_name)  # a group's `npu` backend names its HCCL communicator
    _ACTIVE = torch_npu
    return torch_npu


def activate_from_env() -> Any:
    """activate() with the options the parent process put in the environment."""
    return activate(
        soc_name=os.environ.get(SOC_VAR, "Ascend910B1"),
        device_count=int(os.environ.get(DEVICES_VAR, "1")),
        memory_bytes=int(os.environ.get(MEMORY_VAR, str(DEFAULT_MEMORY))),
        triton_driver=os.environ.get(TRITON_VAR) == "1",
    )


def child_env(
    env: dict[str, str] | None = None,
    soc_name: str = "Ascend910B1",
    device_count: int = 1,
    memory_bytes: int = DEFAULT_MEMORY,
    triton_driver: bool = False,
) -> dict[str, str]:
    """An environment in which every Python process starts with the emulator wired.

    vLLM starts Python subprocesses (e.g. `python -m vllm.model_executor.models.registry`
    to inspect a model when its model-info cache is cold); they load the plugin with
    VLLM_ASCEND_DEVICE=npu and must find the same emulated NPU as their parent.
    """
    out = dict(os.environ if env is None else env)
    paths = [str(SITE_DIR), str(TESTS_DIR)]
    if out.get("PYTHONPATH"):
        paths.append(out["PYTHONPATH"])
    out["PYTHONPATH"] = os.pathsep.join(paths)
    out[ACTIVE_VAR] = "1"
    out[SOC_VAR] = soc_name
    out[DEVICES_VAR] = str(device_count)
    out[MEMORY_VAR] = str(memory_bytes)
    if triton_driver:
        out[TRITON_VAR] = "1"
    return out
