"""The host's native kernels in tests: present, or a clear reason they are not."""

from __future__ import annotations

import shutil
from typing import TypeVar

import pytest

T = TypeVar("T")


def has_compiler() -> bool:
    """A C++ compiler torch's extension builds can use (ninja drives it)."""
    return bool((shutil.which("c++") or shutil.which("g++")) and shutil.which("ninja"))


needs_compiler = pytest.mark.skipif(
    not has_compiler(), reason="no C++ compiler or ninja: the native kernels cannot be built"
)


def built_or_skip(found: T | None, kernel: str, fallback: str) -> T:
    """`found` (a native kernel accessor's answer), or the test skips where there is no
    C++ compiler (the host keeps `fallback`); with a compiler, a failed build fails."""
    if found is None:
        if shutil.which("c++") or shutil.which("g++"):
            pytest.fail(f"a C++ compiler is installed but the native {kernel} did not build")
        pytest.skip(f"no C++ compiler: the host keeps {fallback}")
    return found
