"""MooncakeConnector on the host device: its worker's device index without an accelerator.

vLLM's MooncakeConnectorWorker reads torch.accelerator.current_device_index() first thing
(to rebind its sender threads to that device); with no accelerator that raises. The host
has one device, index 0, and the platform's set_device accepts it; only during the worker's
construction does torch.accelerator answer so, and only when no accelerator exists.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from adapters.vllm.patches._symbols import rebind, resolve

if TYPE_CHECKING:
    from ascend_core.patches import PatchSpec

HOST_DEVICE_INDEX = 0


@contextlib.contextmanager
def _host_device_index() -> Iterator[None]:
    if torch.accelerator.is_available():
        yield
        return
    original = torch.accelerator.current_device_index
    torch.accelerator.current_device_index = lambda: HOST_DEVICE_INDEX  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.accelerator.current_device_index = original  # type: ignore[assignment]


def host_device_index(spec: PatchSpec) -> None:
    original = resolve(spec.target)
    if getattr(original, "__ascend_patch__", None) == spec.id:
        return

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        with _host_device_index():
            original(self, *args, **kwargs)

    init.__ascend_patch__ = spec.id  # type: ignore[attr-defined]
    rebind((spec.target,), init)
