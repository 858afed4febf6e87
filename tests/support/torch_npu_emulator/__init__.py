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
from support.torch_npu_emulator import dispatcher, graphs
from support.torch_npu_emulator.binding import bind
from support.torch_npu_emulator.npu_runtime import EmulatedNpuModule
from support.torch_npu_emulator.profiler import make_profiler, profiled_launch, replay_recorder
from support.torch_npu_emulator.semantics import IMPLEMENTED as _DENSE
from support.torch_npu_emulator.semantics_gdn import IMPLEMENTED as _GDN
from support.torch_npu_emulator.semantics_graph import HOST_HELPERS
from support.torch_npu_emulator.semantics_graph import IMPLEMENTED as _GRAPH
from support.torch_npu_emulator.semantics_mc2 import IMPLEMENTED as _MC2
from support.torch_npu_emulator.semantics_mla import IMPLEMENTED as _MLA
from support.torch_npu_emulator.semantics_moe import IMPLEMENTED as _MOE
from support.torch_npu_emulator.semantics_sparse_mla import CHIP_AWARE
from support.torch_npu_emulator.semantics_sparse_mla import IMPLEMENTED as _SPARSE
from support.torch_npu_emulator.semantics_w4a16 import IMPLEMENTED as _W4A16
from support.torch_npu_emulator.semantics_weight_quant import IMPLEMENTED as _WEIGHT_QUANT

# _MLA's attention op adds the MLA cases to the dense one; _W4A16's npu_weight_quant_batchmatmul
# takes int4-in-int32 weights itself and hands int8 ones to _WEIGHT_QUANT's.
IMPLEMENTED = {
    **_DENSE, **_MOE, **_MC2, **_MLA, **_SPARSE, **_GDN, **_GRAPH, **_WEIGHT_QUANT, **_W4A16
}

__all__ = ["EmulatedOp", "EmulatedTorchNpu", "make_torch_npu"]


class EmulatedOp:
    """torch_npu.<op>: binds, logs, computes; `op.out` / `op.default` reach one overload
    (the out overload takes `out=[...]`, as torch_npu's Python binding does)."""

    def __init__(
        self,
        owner: EmulatedTorchNpu,
        name: str,
        overloads: list[dict[str, Any]],
        only: str | None = None,
    ):
        self._owner = owner
        self.__name__ = name
        self._overloads = overloads
        self._only = only

    def __getattr__(self, attr: str) -> EmulatedOp:
        if attr.startswith("_") or self._only is not None:
            raise AttributeError(attr)
        wanted = "" if attr == "default" else attr
        chosen = [o for o in self._overloads if o["overload"] == wanted]
        if not chosen:
            raise AttributeError(f"torch_npu.{self.__name__} has no overload '{attr}'")
        op = EmulatedOp(self._owner, self.__name__, chosen, only=attr)
        setattr(self, attr, op)
        return op

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            # Traced by Dynamo: the dispatcher op, as torch_npu's ops are (dispatcher.py).
            op = dispatcher.traced(self.__name__, self._only)
            return op(*args, **_out_list(self._overloads, kwargs))
        return self._owner._launch(self, args, kwargs)


def _out_list(overloads: list[dict[str, Any]], kwargs: dict[str, Any]) -> dict[str, Any]:
    """out=[a, b] onto the out overload's mutable arguments, in order."""
    if "out" not in kwargs:
        return kwargs
    mutable = [
        a["name"]
        for o in overloads
        if o["overload"] == "out"
        for a in o["arguments"]
        if a.get("mutable")
    ]
    kwargs = dict(kwargs)
    outs = kwargs.pop("out")
    outs = [outs] if isinstance(outs, torch.Tensor) else list(outs)
    if len(outs) != len(mutable):
        raise TypeError(f"out= takes {len(mutable)} tensor(s) ({', '.join(mutable)})")
    kwargs.update(zip(mutable, outs, strict=True))
    return kwargs


def _shell(value: Any) -> Any:
    """A device tensor as a meta tensor of its shape and dtype (lists and tuples through)."""
    if isinstance(value, torch.Tensor) and value.device.type == "npu":
        return torch.empty_strided(
            value.shape, value.stride(), dtype=value.dtype, device="meta"
        )
    if isinstance(value, (list, tuple)):
        return type(value)(_shell(v) for v in value)
    return value


class CallLog(list):  # type: ignore[type-arg]
    """`torch_npu.calls`: (op, overload, bound arguments) per call, oldest first.

    The last KEEP calls hold their arguments as given; older ones hold their device
    tensors as meta tensors (shape, dtype, strides; no memory): a log holding every
    argument kept each step's activations allocated on the device, about 0.7 MB more per
    generate call of a tiny model.
    """

    KEEP = 64

    def append(self, call: Any) -> None:
        super().append(call)
        old = len(self) - self.KEEP - 1
        if old >= 0:
            name, overload, bound = self[old]
            self[old] = (name, overload, {k: _shell(v) for k, v in bound.items()})


def _mutable(overloads: list[dict[str, Any]], overload: str) -> list[str]:
    return [
        a["name"]
        for o in overloads
        if o["overload"] == overload
        for a in o["arguments"]
        if a.get("mutable")
    ]


class EmulatedTorchNpu(types.ModuleType):
    """Stands in for the torch_npu module; only what 2.14.0 has can be reached."""

    def __init__(self, soc_name: str = "Ascend910B1", device_count: int = 1) -> None:
        super().__init__("torch_npu")
        data = load_schemas()
        self._ops: dict[str, list[dict[str, Any]]] = data["ops"]
        self.__version__ = data["provenance"]["torch_npu_version"]
        self.calls: list[tuple[str, str, dict[str, Any]]] = CallLog()
        self.npu = EmulatedNpuModule(
            data["python_api"]["torch_npu.npu"],
            soc_name=soc_name,
            device_count=device_count,
            torch_npu=self,
        )
        self._C = types.SimpleNamespace(_weak_ref_tensor=self._weak_ref_tensor)
        # torch_npu.profiler; its recording sessions see each op launched (_launch).
        self._profiling: list[Any] = []
        self.profiler = make_profiler(self)
        dispatcher.register(self, self._ops, IMPLEMENTED)

    def _weak_ref_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        """torch_npu._C._weak_ref_tensor: the same memory, not kept alive."""
        return self.npu.device().weak_ref(tensor)

    def _launch(self, op: EmulatedOp, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self._profiling:
            return profiled_launch(self, op.__name__, lambda: self._launch_op(op, args, kwargs))
        return self._launch_op(op, args, kwargs)

    def _launch_op(self, op: EmulatedOp, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        name = op.__name__
        device = self.npu._ext
        if device is not None:
            mode = graphs.active_dispatch_mode(name)
            if mode is not None and graphs.is_current_stream_capturing():
                return mode.dispatch(op, args, kwargs)
        overload, bound = bind(name, op._overloads, args, _out_list(op._overloads, kwargs))
        self.calls.append((name, overload, bound))
        impl = IMPLEMENTED.get(name)
        if impl is None or overload not in ("", "out"):
            shown = f"{name}.{overload}" if overload else name
            raise NotImplementedError(f"torch_npu.{shown} exists in 2.14.0 but is not emulated")

        def run(which: str, values: dict[str, Any]) -> Any:
            if name in CHIP_AWARE:  # refusals that differ between A2/A3 and A5
                values = {**values, "_soc": self.npu.soc_name}
            result = impl(values)
            if which != "out":
                return result
            outs = [values[n] for n in _mutable(self._ops[name], which)]
            results = result if isinstance(result, tuple) else (result,)
            for dst, src in zip(outs, results, strict=False):
                if dst.numel() == src.numel():  # a softmax_lse the semantics do not model
                    dst.copy_(src.reshape(dst.shape))
            return tuple(outs)

        if device is None:
            return run(overload, bound)  # host tensors: the emulated device is not installed
        if name in HOST_HELPERS:
            return run(overload, bound)  # host-side helpers: no kernel launch
        current = torch.accelerator.current_stream()
        if graphs.updating(current):
            return graphs.apply_update(name, overload, bound)
        graphs.check_launch(name)
        # One kernel launch on a device: its aten ops and reads are not the caller's.
        device.count_op(f"torch_npu::{name}")
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
                result = run(overload, bound)
        finally:
            device.set_uncounted(old)
        if device.capture_of_current():
            # A replay runs the op again: recording sessions see its kernel then too.
            graphs.record_op(name, overload, replay_recorder(self, name, run), bound, result, where)
        return result

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
