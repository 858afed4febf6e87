"""vLLM's Triton kernels replaced by our ports' calls: on a host without Triton, and on the NPU.

Each (patches/kernel_bindings.py, on the port the container serves) is wrapped in vLLM's
`KernelOverride` (what its kernel-override registry,
`vllm.triton_utils.dispatcher.register_kernels`, installs: it maps the launch
`kernel[grid](**kwargs)` onto our function) and set on the kernel's holder, plus
the copies the patch spec declares (`also_rebind`). `register_kernels` itself would
also find copies by scanning every attribute of every loaded module (about 5,800
modules by then): 150-200 ms of each start on this machine. The scan moves to a
test instead (tests/integration/vllm/test_kernel_overrides.py), which checks that no
undeclared reference to the original kernel is left.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from adapters.container import container
from adapters.vllm.patches import kernel_bindings as kb
from adapters.vllm.patches._symbols import holder_and_attr, rebind
from ascend_core.errors import ConfigError

if TYPE_CHECKING:
    from adapters.container import Container
    from ascend_core.patches import PatchSpec

# Registry target -> our implementation, built on the serving device's port (resolved from
# the container `override` hands it) when applied.
IMPLEMENTATIONS: dict[str, Callable[[Container], Callable[..., Any]]] = {
    "vllm.v1.worker.block_table:ComputeSlotMappingKernel.kernel": lambda c: (
        kb.slot_mapping_kernel(c.slot_mapping())
    ),
    "vllm.v1.spec_decode.utils:_eagle_step_slot_mapping_metadata.kernel": lambda c: (
        kb.eagle_step_kernel(c.draft_input_ops())
    ),
    "vllm.v1.spec_decode.utils:_eagle_prepare_inputs_padded.kernel": lambda c: (
        kb.eagle_prepare_inputs_kernel(c.draft_input_ops())
    ),
    "vllm.v1.spec_decode.utils:_eagle_prepare_next_token_padded.kernel": lambda c: (
        kb.eagle_next_token_kernel(c.draft_input_ops())
    ),
    "vllm.v1.spec_decode.utils:_copy_and_expand_eagle_inputs.kernel": lambda c: (
        kb.eagle_expand_inputs_kernel(c.draft_input_ops())
    ),
    "vllm.v1.sample.rejection_sampler:_expand.kernel": lambda c: (
        kb.expand_kernel(c.rejection_ops())
    ),
}

_registered: set[str] = set()


def override(spec: PatchSpec) -> None:
    """Register our implementation of `spec.target`; once per process."""
    if spec.target in _registered:
        return
    make = IMPLEMENTATIONS.get(spec.target)
    if make is None:
        raise ConfigError(
            f"No host implementation of {spec.target} (patch {spec.id}).",
            "disable speculative decoding when serving on the host device",
        )
    from vllm.triton_utils.dispatcher import KernelOverride

    holder, attr = holder_and_attr(spec.target)
    wrapper = KernelOverride(getattr(holder, attr), make(container()))
    setattr(holder, attr, wrapper)
    if not isinstance(holder, type):
        # A JIT warmup owner (an instance) caches its kernel's argument names; the
        # wrapper's (the same names) are read again at the next launch.
        vars(holder).pop("_kernel_arg_names", None)
    rebind(spec.also_rebind, wrapper)
    _registered.add(spec.target)
