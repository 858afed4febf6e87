"""The function that applies each patch of the core's registry, by patch id.

The core (ascend_core/patches/entries.py) decides which patch, why and for which vLLM;
this table is the vLLM adapter's half: patch id -> `module:function` in this package,
imported only when the plan applies the patch. A test keeps the two id sets equal.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ascend_core.patches import PatchSpec

# vLLM's Triton kernels registered as our ports' calls through its kernel-override
# registry (torch_kernels.py): the extension point, not a rebound function.
_KERNEL_OVERRIDE = "torch_kernels:override"

FUNCTIONS: Mapping[str, str] = {
    "host-slot-mapping-kernel": _KERNEL_OVERRIDE,
    "host-shutdown-accelerator-cache": "shutdown:skip_accelerator_cache_release",
    "host-onednn-linear": "host_linear:use_onednn_gemm",
    "oot-int8-scaled-mm-kernel": "int8_kernel:add_int8_kernel",
    "npu-slot-mapping-kernel": _KERNEL_OVERRIDE,
    "npu-top-k-top-p-torch": "npu_sampler:use_torch_top_k_top_p",
    "host-moe-direct-entry": "moe_entry:call_traced_moe_directly",
    "host-greedy-argmax": "host_sampler:use_native_greedy_argmax",
    "spec-rejection-sample-torch": "rejection_sampler:use_rejection_ops",
    "spec-expand-kernel-torch": _KERNEL_OVERRIDE,
    "host-mooncake-device-index": "mooncake_device:host_device_index",
    "spec-draft-step-slots-torch": _KERNEL_OVERRIDE,
    "spec-draft-sample-indices-torch": _KERNEL_OVERRIDE,
    "spec-draft-next-token-torch": _KERNEL_OVERRIDE,
    "spec-draft-expand-inputs-torch": _KERNEL_OVERRIDE,
    "gdn-layer-on-linear-attention-port": "gdn_layer:register_layer",
    "kda-layer-on-linear-attention-port": "gdn_layer:register_kda_layer",
    "host-ray-actor-resources": "ray_host:actor_resources_in_bundle",
    "host-ray-worker-devices": "ray_host:host_worker_class",
    "npu-graph-capture-communicator": "graph_capture:let_npu_communicator_capture",
    "oot-wna16-mp-kernel": "wna16_kernel:add_wna16_kernel",
    "ct-wna16-moe-int4": "wna16_moe:use_int4_moe_method",
    "oot-fp8-scaled-mm-kernel": "fp8_kernel:add_fp8_kernel",
    "oot-fp8-block-scaled-mm-kernel": "fp8_kernel:add_fp8_kernel",
    "ct-fp8-moe-dequant": "fp8_moe:use_fp8_dequant_moe_method",
    "fp8-moe-dequant": "fp8_moe:use_fp8_dequant_moe_method_for_fp8_config",
    "host-eplb-rearrange-timing": "eplb_timing:time_rearrange_on_host",
    "seeded-counter-noise": "seeded_noise:use_counter_noise_for_seeds",
}


class UnknownPatch(LookupError):
    """The core's registry lists a patch id this adapter has no function for."""


def function_for(patch_id: str) -> Callable[[PatchSpec], None]:
    """The function that applies the patch, imported now."""
    where = FUNCTIONS.get(patch_id)
    if where is None:
        raise UnknownPatch(
            f"patch {patch_id!r} is in the core's registry but not in the vLLM adapter's "
            "table (adapters/vllm/patches/table.py): add its function there"
        )
    module_name, _, func_name = where.partition(":")
    module = importlib.import_module(f"{__package__}.{module_name}")
    function: Callable[[PatchSpec], None] = getattr(module, func_name)
    return function
