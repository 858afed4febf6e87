"""The torch kernel overrides (adapters.vllm.patches.torch_kernels) leave no reference to
vLLM's original Triton kernel behind.

The override sets vLLM's KernelOverride on the kernel's holder and on the copies the
patch spec declares, instead of vLLM's `register_kernels`, whose scan of every loaded
module costs 150-200 ms of each start. This test runs that scan, in a fresh process
that has imported what a serve imports, so an undeclared copy fails here.
"""

from __future__ import annotations

import pytest

from support.fresh_process import run_ok

SCAN = """
import importlib, sys
for name in ("vllm.engine.arg_utils", "vllm.model_executor.models.llama",
             "vllm.v1.attention.backends.registry", "vllm.v1.worker.gpu_worker",
             "vllm.v1.worker.gpu_model_runner", "vllm.v1.worker.block_table",
             "vllm.v1.core.sched.scheduler", "vllm.v1.engine.core",
             "vllm.v1.spec_decode.eagle", "vllm.v1.spec_decode.draft_model",
             "vllm.v1.sample.rejection_sampler"):
    importlib.import_module(name)
from adapters.vllm.patches import apply_one
from adapters.vllm.patches._symbols import resolve
from ascend_core.patches import REGISTRY
from vllm.triton_utils.dispatcher import KernelOverride

spec = REGISTRY.get(sys.argv[1])
original = resolve(spec.target)
assert not isinstance(original, KernelOverride), "applied before the test"
apply_one(spec)
installed = resolve(spec.target)
assert isinstance(installed, KernelOverride)
assert (installed.func.__module__, installed.func.__name__) == (
    "adapters.vllm.patches.kernel_bindings", sys.argv[2])
for symbol in spec.also_rebind:
    assert resolve(symbol) is installed, symbol
# vLLM's own scan (dispatcher._rebind_kernels): module attributes, and the `kernel`
# attribute of objects held by modules (JIT warmup owners).
left = []
for module in list(sys.modules.values()):
    if module is sys.modules["__main__"]:  # this script's own variables
        continue
    for attr, value in list(getattr(module, "__dict__", {}).items()):
        if value is original:
            left.append(f"{module.__name__}.{attr}")
        elif hasattr(value, "__dict__") and vars(value).get("kernel") is original:
            left.append(f"{module.__name__}.{attr}.kernel")
assert not left, f"undeclared references to the original kernel: {left}"
print("ok", len(sys.modules))
"""


@pytest.mark.parametrize(
    ("patch_id", "binding"),
    [
        ("host-slot-mapping-kernel", "compute_slot_mapping"),
        ("npu-slot-mapping-kernel", "compute_slot_mapping"),
        ("spec-draft-step-slots-torch", "eagle_step_slot_mapping_metadata_kernel"),
        ("spec-draft-sample-indices-torch", "eagle_prepare_inputs_padded_kernel"),
        ("spec-draft-next-token-torch", "eagle_prepare_next_token_padded_kernel"),
        ("spec-draft-expand-inputs-torch", "copy_and_expand_eagle_inputs_kernel"),
        ("spec-expand-kernel-torch", "expand_kernel"),
    ],
)
def test_the_override_leaves_no_reference_to_the_original_kernel(
    patch_id: str, binding: str
) -> None:
    run_ok(SCAN, patch_id, binding)
