"""An emulated torch_npu module for tests: ops bound against the 2.14.0 schemas, run on the host.

make_torch_npu() returns a module-like object. Each op call is first bound against
the op's schemas extracted from the torch_npu 2.14.0 wheel (an unknown op, argument
or type raises as the real module would), then computed by `semantics`. Every call
is logged in `.calls` as (op name, overload, bound arguments).
"""

from __future__ import annotations

import contextlib
import types
from typing import Any

import torch

from adapters.npu.schemas import load_schemas
from support.torch_npu_emulator.binding import bind
from support.torch_npu_emulator.npu_runtime import EmulatedNpuModule
from support.torch_npu_emulator.semantics import IMPLEMENTED as _DENSE
from support.torch_npu_emulator.semantics_mla import IMPLEMENTED as _MLA
from support.torch_npu_emulator.semantics_moe import IMPLEMENTED as _MOE

IMPLEMENTED = {**_DENSE, **_MOE, **_MLA}  # _MLA's attention op adds the MLA cases

__all__ = ["EmulatedOp", "EmulatedTorchNpu", "make_torch_npu"]


class EmulatedOp:
    """torch_npu.<op>: binds, logs, computes."""

    def __init__(self, owner: EmulatedTorchNpu, name: str, overloads: list[dict[str, Any]]):
        self._owner = owner
        self.__name__ = name
        self._overloads = overloads

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        overload, bound = bind(self.__name__, self._overloads, args, kwargs)
        self._owner.calls.append((self.__name__, overload, bound))
        impl = IMPLEMENTED.get(self.__name__)
        if impl is None or overload != "":
            shown = f"{self.__name__}.{overload}" if overload else self.__name__
            raise NotImplementedError(f"torch_npu.{shown} exists in 2.14.0 but is not emulated")
        device = self._owner.npu._ext
        if device is None:
            return impl(bound)  # host tensors: the emulated device is not installed
        # One kernel launch on a device: its aten ops and reads are not the caller's.
        device.count_op(f"torch_npu::{self.__name__}")
        # The kernel runs on its inputs' device: tensors the semantics make without a
        # device (index lists, masks, outputs) are made there, as a device kernel's are.
        where = next(
            (
                v.device
                for v in bound.values()
                if isinstance(v, torch.Tensor) and v.device.type == "npu"
            ),
            None,
        )
        old = device.set_uncounted(True)
        try:
            with torch.device(where) if where is not None else contextlib.nullcontext():
                return impl(bound)
        finally:
            device.set_uncounted(old)


class EmulatedTorchNpu(types.ModuleType):
    """Stands in for the torch_npu module; only what 2.14.0 has can be reached."""

    def __init__(self, soc_name: str = "Ascend910B1", device_count: int = 1) -> None:
        super().__init__("torch_npu")
        data = load_schemas()
        self._ops: dict[str, list[dict[str, Any]]] = data["ops"]
        self.__version__ = data["provenance"]["torch_npu_version"]
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.npu = EmulatedNpuModule(
            data["python_api"]["torch_npu.npu"], soc_name=soc_name, device_count=device_count
        )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        overloads = self.__dict__.get("_ops", {}).get(name)
        if overloads is None:
            raise AttributeError(f"module 'torch_npu' has no attribute '{name}'")
        op = EmulatedOp(self, name, overloads)
        setattr(self, name, op)
        return op

    def calls_of(self, name: str) -> list[dict[str, Any]]:
        return [bound for op, _, bound in self.calls if op == name]


def make_torch_npu(soc_name: str = "Ascend910B1", device_count: int = 1) -> EmulatedTorchNpu:
    return EmulatedTorchNpu(soc_name=soc_name, device_count=device_count)
