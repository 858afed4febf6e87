"""Binds a call to a torch_npu op against its schema, as torch's dispatcher would.

Positional arguments fill the positional parameters in order; keyword-only ones
must be named; unknown, duplicated, missing or ill-typed arguments raise TypeError.
With several overloads, the first that binds wins (torch tries them in turn).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

# Types the emulator checks; others (Layout, Device, Generator, ...) are accepted as given.
_CHECKED = {"Tensor", "int", "SymInt", "float", "bool", "str", "ScalarType", "Scalar"}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _matches(type_name: str, value: Any) -> bool:
    if type_name.endswith("?"):
        return value is None or _matches(type_name[:-1], value)
    if "[" in type_name:
        elem = type_name[: type_name.index("[")]
        if not isinstance(value, (list, tuple)):
            # int[N] accepts a single int that torch broadcasts
            return elem in ("int", "SymInt") and _is_int(value) and type_name != f"{elem}[]"
        return all(_matches(elem, v) for v in value)
    base = type_name.split("(")[0]
    if base not in _CHECKED:
        return True
    if base == "Tensor":
        return isinstance(value, torch.Tensor)
    if base in ("int", "SymInt"):
        return _is_int(value)

    if base == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if base == "bool":
        return isinstance(value, bool)
    if base == "str":
        return isinstance(value, str)
    if base == "ScalarType":
        return isinstance(value, torch.dtype)
    if base == "Scalar":
        return isinstance(value, (int, float, bool, complex))
    return True


def _dtype_as_int(param: Mapping[str, Any], value: Any) -> bool:
    """torch_npu types its dtype arguments `int` (so that its own dtypes, plain ints, fit)
    and its docs and callers pass torch dtypes there (dst_type=torch.int8, dtype=torch.qint8,
    output_dtype=torch.bfloat16; the wheel's meta registrations map them back)."""
    name = param["name"]
    return (
        param["type"].rstrip("?") == "int"
        and (name == "dtype" or name.endswith(("_dtype", "dst_type")))
        and isinstance(value, torch.dtype)
    )


def bind_one(
    name: str, overload: Mapping[str, Any], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """The full argument dict (defaults filled in) for one overload, or TypeError."""
    params = overload["arguments"]
    positional = [p for p in params if not p["kwarg_only"]]
    if len(args) > len(positional):
        raise TypeError(
            f"{name}() takes {len(positional)} positional argument(s) but {len(args)} were given"
        )
    bound: dict[str, Any] = {}
    for param, value in zip(positional, args, strict=False):
        bound[param["name"]] = value
    known = {p["name"] for p in params}
    for key, value in kwargs.items():
        if key not in known:
            raise TypeError(f"{name}() got an unexpected keyword argument '{key}'")
        if key in bound:
            raise TypeError(f"{name}() got multiple values for argument '{key}'")
        bound[key] = value
    for param in params:
        pname = param["name"]
        if pname not in bound:
            if not param["has_default"]:
                raise TypeError(f"{name}() missing required argument '{pname}'")
            bound[pname] = param.get("default")
        elif _dtype_as_int(param, bound[pname]):
            pass
        elif not _matches(param["type"], bound[pname]):
            raise TypeError(
                f"{name}(): argument '{pname}' must be {param['type']}, "
                f"not {type(bound[pname]).__name__}"
            )
    return bound


def bind(
    name: str,
    overloads: Sequence[Mapping[str, Any]],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> tuple[str, dict[str, Any]]:
    """(overload name, bound arguments) for the first overload that accepts the call."""
    errors = []
    for overload in overloads:
        try:
            return overload["overload"], bind_one(name, overload, args, kwargs)
        except TypeError as exc:
            errors.append(str(exc))
    raise TypeError(
        f"{name}(): no overload of torch_npu 2.14.0 accepts these arguments:\n  "
        + "\n  ".join(errors)
    )
