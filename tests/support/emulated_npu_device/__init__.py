"""An emulated NPU device for tests: torch's PrivateUse1 backend renamed `npu`, host memory.

Test support, not product. `install()` builds (once, cached) and loads the C++ extension
in device.cpp, registers it and names it `npu`: tensors then have device type `npu`,
every aten op runs on CPU kernels over the same memory, an op mixing devices fails, and
device-to-host copies, scalar reads, host-to-device copies and ops are counted. It also
captures and replays NPU graphs (the Python API: support.torch_npu_emulator.graphs).
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from support.emulated_npu_device.build import load

__all__ = [
    "counters",
    "extension",
    "graph_memory",
    "install",
    "launch_sources",
    "launches",
    "op_counts",
    "reset_counters",
    "syncs",
    "uncounted",
]

_INSTALLED = False


def extension() -> ModuleType:
    return load()


def install(device_count: int, capacity: int, device_module: Any) -> ModuleType:
    """Register the device as `npu` (idempotent; later calls reconfigure count and capacity).

    `device_module` becomes `torch.npu` (as torch_npu registers its own `torch_npu.npu`).
    """
    global _INSTALLED
    import torch

    ext = load()
    ext.setup(device_count, capacity)
    if not _INSTALLED:
        torch.utils.rename_privateuse1_backend("npu")
        torch._register_device_module("npu", device_module)
        torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
        _INSTALLED = True
    return ext


def counters() -> dict[str, int]:
    """d2h_copies/bytes, h2d_copies/bytes, d2d_copies, scalar_reads, fallback_ops (ops
    launched from the host: aten ops and torch_npu kernels, captured ones included,
    replayed ones not), dynamic_shape_ops (ops whose output size the host must wait for),
    graph_captures (captures ended), graph_replays (NPUGraph.replay calls) and
    graph_replayed_ops (recorded ops those replays ran). Reset per step to read a step."""
    return dict(load().counters())


def launches(c: dict[str, int]) -> int:
    """Ops launched from the host outside graph replays (each a host call and a launch)."""
    return c["fallback_ops"]


def graph_memory(device: int = 0) -> int:
    """Bytes the device's graph pools hold (part of its allocated bytes)."""
    return int(load().memory(device)["graph_pools"])


def op_counts() -> dict[str, int]:
    return dict(load().op_counts())


def reset_counters() -> None:
    load().reset_counters()


def syncs(c: dict[str, int]) -> int:
    """Device-to-host synchronisations: copies to the host, scalar reads, dynamic shapes."""
    return c["d2h_copies"] + c["scalar_reads"] + c["dynamic_shape_ops"]


@contextlib.contextmanager
def uncounted() -> Iterator[None]:
    """Inside one emulated kernel: its aten ops and reads are not the caller's."""
    ext = load()
    old = ext.set_uncounted(True)
    try:
        yield
    finally:
        ext.set_uncounted(old)


# Frames of these files are where a launch comes from; the emulator's and torch's are not.
_SOURCES = ("/vllm/", "/src/adapters/", "/src/ascend_core/")
_RUNNER = (  # V1's model runners, then V2's
    "gpu_model_runner.py",
    "npu_model_runner.py",
    "gpu/model_runner.py",
    "npu_model_runner_v2.py",
)


def _where() -> str:
    """`runner function <- file:function` of the launch being counted: the nearest frame of
    vLLM or the plugin, and the model runner's method it runs under."""
    frame = sys._getframe(2)
    near = runner = ""
    while frame is not None:
        path = frame.f_code.co_filename
        if not near and any(s in path for s in _SOURCES):
            near = f"{path.rsplit('/', 1)[-1]}:{frame.f_code.co_name}"
        if path.endswith(_RUNNER):
            runner = frame.f_code.co_name
            break
        frame = frame.f_back
    return f"{runner or '?'} <- {near or '?'}"


@contextlib.contextmanager
def launch_sources() -> Iterator[Counter[tuple[str, str]]]:
    """While the block runs, each op launched from the host and each copy (`copy:h2d`,
    `copy:d2h`, `copy:d2d`) counted by where it comes from: (what, where) -> count."""
    seen: Counter[tuple[str, str]] = Counter()
    ext = load()
    ext.set_launch_hook(lambda what: seen.update([(what, _where())]))
    try:
        yield seen
    finally:
        ext.set_launch_hook(None)
