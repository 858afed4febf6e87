"""The host's shutdown patch (adapters.vllm.patches.shutdown) reaches every binding of
vLLM's cleanup_dist_env_and_memory, whether the engine core is imported before or after
registration applies it.

Registration rebinds the copies only in modules already imported (importing the engine
core just to rebind it would add to every vLLM process's start); a module imported later
takes the patched function from the module it imports it from. Run in a fresh process,
which scans every loaded module for the original function, so a re-export missing from
the spec's also_rebind fails here.
"""

from __future__ import annotations

import pytest

from support.fresh_process import run_ok

SCAN = """
import importlib, sys
engine_core_first = sys.argv[1] == "engine-core-first"
import vllm.distributed.parallel_state as parallel_state
original = parallel_state.cleanup_dist_env_and_memory
if engine_core_first:
    import vllm.v1.engine.core
from adapters.vllm.patches import apply_one
from ascend_core.patches import REGISTRY

spec = REGISTRY.get("host-shutdown-accelerator-cache")
apply_one(spec)
assert ("vllm.v1.engine.core" in sys.modules) == engine_core_first, "imported by the patch"
for name in ("vllm.engine.arg_utils", "vllm.v1.worker.gpu_worker", "vllm.v1.engine.core",
             "vllm.v1.engine.core_client", "vllm.entrypoints.llm"):
    importlib.import_module(name)
patched = parallel_state.cleanup_dist_env_and_memory
assert patched is not original and patched.__ascend_patch__ == spec.id
assert sys.modules["vllm.v1.engine.core"].cleanup_dist_env_and_memory is patched
left = [
    f"{module.__name__}.{attr}"
    for module in list(sys.modules.values())
    if module is not sys.modules["__main__"]
    for attr, value in list(getattr(module, "__dict__", {}).items())
    if value is original
]
assert not left, f"bindings of the unpatched cleanup left: {left}"
print("ok", len(sys.modules))
"""


@pytest.mark.parametrize("order", ["engine-core-first", "patch-first"])
def test_every_binding_of_the_cleanup_is_patched(order: str) -> None:
    run_ok(SCAN, order)
