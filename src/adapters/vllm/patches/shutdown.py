"""Engine teardown on a host without an accelerator: skip torch.accelerator's cache release.

vLLM's cleanup calls torch.accelerator.empty_cache() / empty_host_cache() unless the
platform is its own CPU one; with no accelerator both raise. There is no accelerator
cache to release, so during cleanup they become no-ops; elsewhere torch is untouched.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from adapters.vllm.patches._symbols import rebind_imported, resolve

if TYPE_CHECKING:
    from ascend_core.patches import PatchSpec

_CACHE_CALLS = ("empty_cache", "empty_host_cache")


@contextlib.contextmanager
def _no_accelerator_cache_release() -> Iterator[None]:
    if torch.accelerator.is_available():
        yield
        return
    saved = {name: getattr(torch.accelerator, name, None) for name in _CACHE_CALLS}
    try:
        for name in _CACHE_CALLS:
            setattr(torch.accelerator, name, lambda *a, **k: None)
        yield
    finally:
        for name, original in saved.items():
            if original is not None:
                setattr(torch.accelerator, name, original)


def skip_accelerator_cache_release(spec: PatchSpec) -> None:
    original = resolve(spec.target)
    if getattr(original, "__ascend_patch__", None) == spec.id:
        return

    @functools.wraps(original)
    def cleanup(*args: Any, **kwargs: Any) -> Any:
        with _no_accelerator_cache_release():
            return original(*args, **kwargs)

    cleanup.__ascend_patch__ = spec.id  # type: ignore[attr-defined]
    rebind_imported(spec.target, spec.also_rebind, cleanup)
