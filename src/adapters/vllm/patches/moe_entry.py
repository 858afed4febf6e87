"""The host's MoE layers called directly, so the compiled graph traces them.

On an out-of-tree platform vLLM's MoE runner enters every layer through the opaque
custom op `vllm.moe_forward`: the compiled graph stops there, and the runner's Python
and ours run eagerly at every call (about 100 us a layer on the host). vLLM's own CPU
platform calls the same `_moe_forward` function directly, so Dynamo traces through it
into the experts' kernels. The host does the same for a layer whose MoE method says
at load that its ops trace (`traced_in_graph`); any other layer (a quantized method,
weights the native experts do not take) keeps the opaque op.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from adapters.vllm.patches._symbols import rebind, resolve

if TYPE_CHECKING:
    from ascend_core.patches import PatchSpec


def _entry(
    runner: Any, opaque: Callable[..., Any], direct: Callable[..., Any]
) -> Callable[..., Any]:
    """The runner's forward entry: `direct` once its method traces, else `opaque`.

    Read at each call, not at construction: the runner picks its entry before the
    weights load, and the method decides at load. Under Dynamo the read is a guard.
    """

    def moe_entry(*args: Any) -> Any:
        if getattr(runner.routed_experts.quant_method, "traced_in_graph", False):
            return direct(*args)
        return opaque(*args)

    return moe_entry


def call_traced_moe_directly(spec: PatchSpec) -> None:
    """MoERunner._select_forward, wrapped: the direct entry where the method traces."""
    original = resolve(spec.target)
    if getattr(original, "__ascend_patch__", None) == spec.id:
        return
    from vllm.model_executor.layers.fused_moe.runner import moe_runner

    @functools.wraps(original)
    def select_forward(self: Any) -> Callable[..., Any]:
        opaque = original(self)
        shared = self._shared_experts is not None
        direct = moe_runner._moe_forward_shared if shared else moe_runner._moe_forward
        return opaque if opaque is direct else _entry(self, opaque, direct)

    select_forward.__ascend_patch__ = spec.id  # type: ignore[attr-defined]
    rebind((spec.target,), select_forward)
