"""The sampler's top-k/top-p masking on the NPU: the sampling port's kernel, or vLLM's
torch path, never vLLM's CUDA-tuned Triton kernel.

vLLM picks its Triton kernel whenever Triton is importable (on an NPU host, through
triton-ascend) and otherwise a torch implementation. Here the device's SamplingOps masks
first (the plugin's own Triton kernel where the NPU adapter chose it); where it has none,
vLLM's torch one is taken with no host sync (allow_cpu_sync=False), so a sampled step
stays at one device-to-host copy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from adapters.vllm.patches._symbols import rebind, resolve

if TYPE_CHECKING:
    from ascend_core.patches import PatchSpec


def use_torch_top_k_top_p(spec: PatchSpec) -> None:
    original = resolve(spec.target)
    if getattr(original, "__ascend_patch__", None) == spec.id:
        return
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch

    from adapters.container import container

    # The provider, bound here; the port itself is resolved at the sampler's call (this
    # patch applies at registration, in processes that never sample).
    sampling_ops = container().sampling_ops

    def apply_top_k_top_p(logits: Any, k: Any, p: Any, has_topp_only_rows: bool = True) -> Any:
        masked = sampling_ops().top_k_top_p(logits, k, p)
        if masked is not None:
            return masked
        return apply_top_k_top_p_pytorch(logits, k, p, allow_cpu_sync=False)

    apply_top_k_top_p.__ascend_patch__ = spec.id  # type: ignore[attr-defined]
    rebind(spec.symbols(), apply_top_k_top_p)
