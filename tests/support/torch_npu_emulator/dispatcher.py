"""The emulated torch_npu ops as dispatcher ops (torch.ops.npu.*), for torch.compile.

Test support, not product. torch_npu's ops are dispatcher ops with meta kernels, so
Dynamo puts them in its graph as they are; the emulated ones are Python callables, which
Dynamo would trace into (and stop at the device's counters). Here each op the emulator
computes is defined under torch.ops.npu with its schema from the 2.14.0 wheel: its kernel
runs the emulated op (binding, logging, counting and graph capture as in eager), and its
fake kernel gives the output shapes: written out below for the dense ops (their semantics
check device values, which fake tensors do not have), else the semantics run on fake
tensors. An op whose semantics need device data (the MoE routing ops) has no usable fake
kernel here, where the wheel has one: tracing it fails. Inductor has no `npu` backend on
the emulator: compile with the "eager" or "aot_eager" backend.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import torch

_LIBRARY: torch.library.Library | None = None
_OWNER: list[Any] = []  # the emulated torch_npu whose ops the kernels run (the latest made)


def _rstd(x: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    kept = x.shape[: x.dim() - gamma.dim()]
    return x.new_empty((*kept, *([1] * gamma.dim())), dtype=torch.float32)


def _swiglu(a: dict[str, Any]) -> torch.Tensor:
    x, dim = a["self"], a["dim"]
    shape = list(x.shape)
    shape[dim] //= 2
    return x.new_empty(shape)


# torch's ScalarType numbers (c10/core/ScalarType.h), which the dispatcher passes for a
# dtype given to an `int` argument (torch_npu types its dtype arguments `int`).
_SCALAR_TYPES = {
    0: torch.uint8, 1: torch.int8, 2: torch.int16, 3: torch.int32, 4: torch.int64,
    5: torch.float16, 6: torch.float32, 7: torch.float64, 11: torch.bool, 12: torch.qint8,
    13: torch.quint8, 14: torch.qint32, 15: torch.bfloat16,
}  # fmt: skip


def _is_dtype_param(param: dict[str, Any]) -> bool:
    name = param["name"]
    return param["type"].rstrip("?") == "int" and (
        name == "dtype" or name.endswith(("_dtype", "dst_type"))
    )


def _dtype(value: Any) -> Any:
    return _SCALAR_TYPES.get(value, value) if isinstance(value, int) else value


def _restore_dtypes(
    schema: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The torch dtypes the caller gave, back from the numbers the dispatcher made them."""
    params = schema["arguments"]
    positional = [p for p in params if not p["kwarg_only"]]
    args = tuple(
        _dtype(v) if i < len(positional) and _is_dtype_param(positional[i]) else v
        for i, v in enumerate(args)
    )
    dtype_names = {p["name"] for p in params if _is_dtype_param(p)}
    kwargs = {k: _dtype(v) if k in dtype_names else v for k, v in kwargs.items()}
    return args, kwargs


def _attention(a: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    from support.torch_npu_emulator.semantics_graph import IMPLEMENTED as HELPERS

    return HELPERS["_npu_fused_infer_attention_score_infer_output"](a)  # type: ignore[no-any-return]


def _grouped_matmul(a: dict[str, Any]) -> list[torch.Tensor]:
    """One x [M, K] and one weight [G, K, N] (int4 in int32: N / 8 words): one [M, N]
    output (split_item 2/3, the only case modelled), of output_dtype or x's dtype."""
    x, w = a["x"][0], a["weight"][0]
    n = w.shape[-1] * (8 if w.dtype == torch.int32 else 1)
    return [x.new_empty((x.shape[0], n), dtype=_dtype(a["output_dtype"]) or x.dtype)]


# Output shapes of the dense ops, as their meta kernels in the wheel give them.
FAKES: dict[str, Callable[[dict[str, Any]], Any]] = {
    "npu_rms_norm": lambda a: (torch.empty_like(a["self"]), _rstd(a["self"], a["gamma"])),
    "npu_add_rms_norm": lambda a: (
        torch.empty_like(a["x1"]),
        _rstd(a["x1"], a["gamma"]),
        torch.empty_like(a["x1"]),
    ),
    "npu_swiglu": _swiglu,
    "npu_clipped_swiglu": lambda a: _swiglu({"self": a["x"], "dim": a["dim"]}),
    "npu_rotary_mul": lambda a: torch.empty_like(a["self"]),
    "npu_mrope": lambda a: (torch.empty_like(a["query"]), torch.empty_like(a["key"])),
    "npu_scatter_nd_update_": lambda a: a["self"],
    "npu_scatter_pa_kv_cache": lambda a: None,
    "npu_fused_infer_attention_score": _attention,
    "npu_dynamic_quant": lambda a: (
        a["input"].new_empty(a["input"].shape, dtype=torch.int8),
        a["input"].new_empty(a["input"].shape[:-1], dtype=torch.float32),
    ),
    # The sparse MLA ops, as semantics_sparse_mla.py returns them (TND, one key head).
    "npu_lightning_indexer": lambda a: (
        a["query"].new_empty((a["query"].shape[0], 1, a["sparse_count"]), dtype=torch.int32),
        a["query"].new_empty((0,)),
    ),
    "npu_sparse_flash_attention": lambda a: (
        torch.empty_like(a["query"]),
        *[a["query"].new_empty(
            (1, *a["query"].shape[:2]) if a["return_softmax_lse"] else (0,),
            dtype=torch.float32) for _ in range(2)],
    ),
    "npu_grouped_matmul": _grouped_matmul,
    "npu_quant_matmul": lambda a: a["x1"].new_empty(
        (a["x1"].shape[0], a["x2"].shape[1]), dtype=_dtype(a["output_dtype"])
    ),
}


def register(
    owner: Any,
    ops: Mapping[str, list[dict[str, Any]]],
    implemented: Mapping[str, Callable[[dict[str, Any]], Any]],
) -> None:
    """Defines every implemented op once per process; later calls only switch `owner`."""
    global _LIBRARY
    _OWNER[:] = [owner]
    if _LIBRARY is not None:
        return
    from support.torch_npu_emulator.binding import bind

    library = torch.library.Library("npu", "DEF")
    for name, impl in implemented.items():
        for overload in ops.get(name, []):
            which = overload["overload"]
            qualified = name + (f".{which}" if which else "")
            library.define(overload["schema"])

            def kernel(
                *args: Any,
                _name: str = name,
                _which: str = which,
                _schema: dict[str, Any] = overload,
                **kwargs: Any,
            ) -> Any:
                op = getattr(_OWNER[0], _name)
                args, kwargs = _restore_dtypes(_schema, args, kwargs)
                return (getattr(op, _which) if _which else op)(*args, **kwargs)

            def fake(
                *args: Any,
                _name: str = name,
                _schema: dict[str, Any] = overload,
                _impl: Callable[[dict[str, Any]], Any] = impl,
                **kwargs: Any,
            ) -> Any:
                args, kwargs = _restore_dtypes(_schema, args, kwargs)
                _, bound = bind(_name, [_schema], args, kwargs)
                where = next(
                    (v.device for v in bound.values() if isinstance(v, torch.Tensor)), None
                )
                with torch.device(where) if where is not None else contextlib.nullcontext():
                    result = FAKES.get(_name, _impl)(bound)
                mutable = [a["name"] for a in _schema["arguments"] if a.get("mutable")]
                if not mutable or _schema["overload"] != "out":
                    return result
                return tuple(bound[n] for n in mutable)

            library.impl(qualified, kernel, "CompositeExplicitAutograd")
            torch.library.register_fake(f"npu::{qualified}", fake, lib=library)
    _LIBRARY = library


def traced(name: str, overload: str | None) -> Any:
    """torch.ops.npu.<name>[.<overload>]: what a compiled graph calls."""
    packet = getattr(torch.ops.npu, name)
    if overload is None:
        return packet
    return getattr(packet, overload)
