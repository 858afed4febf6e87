"""Resolving and rebinding `package.module:Attr.sub` symbols named by the patch registry."""

from __future__ import annotations

import importlib
import sys
from typing import Any


def holder_and_attr(symbol: str) -> tuple[Any, str]:
    """The object that holds the symbol's last attribute, and that attribute's name."""
    module_name, _, attr_path = symbol.partition(":")
    holder: Any = importlib.import_module(module_name)
    *parents, attr = attr_path.split(".")
    for part in parents:
        holder = getattr(holder, part)
    return holder, attr


def resolve(symbol: str) -> Any:
    holder, attr = holder_and_attr(symbol)
    return getattr(holder, attr)


def rebind(symbols: tuple[str, ...], value: Any) -> None:
    for symbol in symbols:
        holder, attr = holder_and_attr(symbol)
        setattr(holder, attr, value)


def rebind_imported(target: str, copies: tuple[str, ...], value: Any) -> None:
    """`target` becomes `value`, and so does each copy (a `from m import name` binding
    elsewhere) in a module already imported; a module imported later binds `value` itself
    when it imports the name, provided every module it imports the name from (re-exports
    such as a package's __init__) is among `copies`. Importing the others here only to
    rebind them would add them to every vLLM process's start."""
    rebind((target, *(c for c in copies if c.partition(":")[0] in sys.modules)), value)
