"""The host-GEMM port: oneDNN (or the native GEMM) reading each weight packed once.

A platform that is neither CUDA, ROCm nor vLLM's own CPU one gets plain
`torch.nn.functional.linear`. In float32 that goes to a BLAS path which measured
2-3.5x slower at decode shapes on this project's host (AMD Zen 4) than oneDNN's own
kernels reading a weight packed once into oneDNN's blocked layout (scripts/bench_gemm.py).
Once `prepack` has found the native build (adapters/cpu/native/packed_linear.cpp), its
GEMM serves instead: the small GEMM at one or two rows, the panel GEMM up to 64 rows,
oneDNN past those, with the pack cache in C++.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch

from adapters.cpu import native
from ports.host_gemm import HostGemm

_PACKED = "_ascend_host_packed_weight"  # layer attribute: (weight, version, packed)
_PLAIN = "_ascend_host_plain_weight"  # layer attribute: the weight as a plain tensor
_DTYPES = (torch.float32, torch.bfloat16)
# The GEMM as one torch op, for a compiled model: Dynamo cannot trace the packing (an
# op without a fake-tensor kernel, and a cache on the layer), so under torch.compile
# the graph holds this op and the packing runs when the graph does.
OP_NAME = "ascend_host::packed_linear"
# Process-wide, as the op is: the packs by weight, and the native GEMM and pack ops once
# prepack found them built.
_packed_by_weight: dict[int, tuple[weakref.ref[torch.Tensor], int, torch.Tensor]] = {}
_native_linear: Any = None
_native_pack: Any = None


class CpuHostGemm(HostGemm):
    """Dense 2-D CPU weights of the dtypes oneDNN packs here (float32, and bfloat16 where
    the CPU has it), with x and bias of the weight's dtype on the CPU; nothing where this
    torch has no oneDNN. `native_ops` gives the native build's GEMM and pack ops, or Nones
    where it is not built (tests hand in their own)."""

    def __init__(self, native_ops: Callable[[], tuple[Any, Any]] | None = None) -> None:
        self._native_ops = native_ops or _native_ops
        self._dtypes = _supported_dtypes()
        # The op the compiled graph calls, defined before anything is traced (a
        # definition inside a trace would break it).
        self._op = packed_linear_op() if self._dtypes else None

    def dtypes(self) -> tuple[torch.dtype, ...]:
        return self._dtypes

    def prepack(self, layers: Iterable[tuple[torch.nn.Module, torch.Tensor]]) -> int:
        """As the first forward would pack, but at once: the packed copies are then
        allocated one after another, not between the first step's activations (measured
        alternated in one process, bf16: 1.03-1.06x tokens/s against packing on first
        use). From here on the native GEMM serves, where the native build is there."""
        if not self._dtypes:
            return 0
        _use_native_gemm(self._native_ops)
        count = 0
        for layer, weight in layers:
            if _eligible(weight, self._dtypes):
                # The graph's GEMM reads the alias, so the pack is keyed by it; the eager
                # GEMM finds the same pack through packed_weight.
                object.__setattr__(layer, _PLAIN, _plain(weight))
                packed_weight(layer, weight)
                count += 1
        return count

    def linear(
        self,
        layer: torch.nn.Module,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
    ) -> torch.Tensor | None:
        dtypes = self._dtypes
        if _native_linear is not None and not torch.compiler.is_compiling():
            # Eager with the native build: the graph's op, on the plain alias. The checks
            # with vLLM's Parameter hooks off: each attribute read of its weight would
            # run its Python __torch_function__ (about 15 us a call, per eager GEMM).
            with torch._C.DisableTorchFunctionSubclass():
                if _serves(x, weight, bias, dtypes):
                    return _native_linear(x, _alias_of(layer, weight), bias)  # type: ignore[no-any-return]
            return None
        if not _serves(x, weight, bias, dtypes):
            return None
        if torch.compiler.is_compiling():
            # The plain alias prepack made: a vLLM parameter would run its Python
            # __torch_function__ (and rewrap the output) at every call. vLLM reloads
            # weights in place, which the alias shares (storage, version).
            plain = getattr(layer, _PLAIN, weight)
            return (_native_linear or self._op)(x, plain, bias)  # type: ignore[no-any-return]
        packed = packed_weight(layer, weight)
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def _supported_dtypes() -> tuple[torch.dtype, ...]:
    if not torch.backends.mkldnn.is_available():
        return ()
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return _DTYPES
    return (torch.float32,)


def _version(weight: torch.Tensor) -> int:
    try:
        return int(weight._version)
    except RuntimeError:  # inference tensors keep no version counter
        return -1


def packed_weight(layer: torch.nn.Module, weight: torch.Tensor) -> torch.Tensor:
    """`weight`'s pack for the host GEMM, made on first use and again after it changes:
    oneDNN's layout, or the native GEMM's panels (a contiguous weight).

    Cached on the layer next to the weight it came from and that weight's version
    counter, so a reload (sleep mode, weight updates) in place or by rebinding repacks.
    The dense weight stays: tied embeddings and vLLM's own weight handling read it.
    A weight the compiled op (or prepack) packed already is not packed again: the pack
    is keyed by the layer's plain alias of the weight while it still is one.
    """
    cached = getattr(layer, _PACKED, None)
    version = _version(weight)
    if cached is not None and cached[0] is weight and cached[1] == version and version >= 0:
        return cached[2]  # type: ignore[no-any-return]
    packed = _packed_for(_alias_of(layer, weight))
    object.__setattr__(layer, _PACKED, (weight, version, packed))
    return packed


def _alias_of(layer: torch.nn.Module, weight: torch.Tensor) -> torch.Tensor:
    """The layer's plain alias of `weight` while it still is one (not left behind by a
    rebinding of the weight), else `weight` itself: what packs and native calls key on."""
    plain = getattr(layer, _PLAIN, None)
    if plain is None:
        return weight
    with torch._C.DisableTorchFunctionSubclass():
        same = (
            plain.data_ptr() == weight.data_ptr()
            and plain.shape == weight.shape
            and plain.stride() == weight.stride()
            and plain.dtype == weight.dtype
        )
    return plain if same else weight


def _plain(weight: torch.Tensor) -> torch.Tensor:
    """`weight` as a plain torch.Tensor: the same storage and the same version counter
    (detach), so an in-place reload reaches the GEMM and repacks."""
    with torch._C.DisableTorchFunctionSubclass():
        return weight.detach()


def _native_ops() -> tuple[Any, Any]:
    return native.packed_linear(), native.pack_linear_weight()


def _use_native_gemm(native_ops: Callable[[], tuple[Any, Any]]) -> None:
    """The native GEMM and pack ops from now on, where the native build is there."""
    global _native_linear, _native_pack
    if _native_linear is None:
        _native_linear, _native_pack = native_ops()


def _eligible(weight: torch.Tensor, dtypes: tuple[torch.dtype, ...]) -> bool:
    return (
        weight.dtype in dtypes
        and weight.dim() == 2
        and weight.layout is torch.strided
        and weight.device.type == "cpu"
    )


def _serves(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    dtypes: tuple[torch.dtype, ...],
) -> bool:
    """Whether the host GEMM takes this call: a dense 2-D CPU weight of `dtypes`, and x and
    bias of its dtype on the CPU; anything else goes to the caller's own GEMM."""
    return (
        _eligible(weight, dtypes)
        and x.dtype == weight.dtype
        and x.device.type == "cpu"
        and (bias is None or bias.dtype == weight.dtype)
    )


def _plain_version(weight: torch.Tensor) -> int:
    """_version with torch-function subclasses' hooks off: vLLM's weights are Parameter
    subclasses whose Python __torch_function__ would run for this read, per GEMM per step."""
    with torch._C.DisableTorchFunctionSubclass():
        return _version(weight)


def _packed_for(weight: torch.Tensor) -> torch.Tensor:
    """packed_weight's cache, keyed by the weight itself (the op is not given the layer);
    the native op's cache once that is in use, so eager and compiled share one pack."""
    if _native_pack is not None:
        with torch._C.DisableTorchFunctionSubclass():
            return _native_pack(weight)  # type: ignore[no-any-return]
    key = id(weight)
    cached = _packed_by_weight.get(key)
    version = _plain_version(weight)
    if cached is not None and cached[0]() is weight and cached[1] == version and version >= 0:
        return cached[2]
    packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach())
    _packed_by_weight[key] = (weakref.ref(weight), version, packed)
    return packed


def _packed_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    if _native_linear is not None:  # its packs may be panels, which only it reads
        return _native_linear(x, weight, bias)  # type: ignore[no-any-return]
    return torch.ops.mkldnn._linear_pointwise(x, _packed_for(weight), bias, "none", [], "")


def _packed_linear_fake(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


_library: list[torch.library.Library] = []  # kept alive: dropping it unregisters the op


def packed_linear_op() -> Any:
    """torch.ops.ascend_host.packed_linear, defined on first use (once per process).

    A plain dispatcher op with a CPU kernel and a fake kernel (torch.library.Library),
    not torch.library.custom_op: the compiled graph calls it 49 times per step, and
    custom_op's Python wrappers cost about ten extra Python calls each.
    """
    namespace, name = OP_NAME.split("::")
    if not _library and not hasattr(getattr(torch.ops, namespace), name):
        lib = torch.library.Library(namespace, "FRAGMENT")
        lib.define(f"{name}(Tensor x, Tensor weight, Tensor? bias) -> Tensor")
        lib.impl(name, _packed_linear, "CPU")
        # The shape function as the op's Meta kernel, which fake tensors (Dynamo's
        # tracing) use; torch.library.register_fake would record the caller's source
        # line through inspect.getmodule, a scan of sys.modules costing ~50 ms a start.
        lib.impl(name, _packed_linear_fake, "Meta")
        _library.append(lib)
    return getattr(getattr(torch.ops, namespace), name).default
