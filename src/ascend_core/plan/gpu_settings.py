"""Step: replace settings that only make sense on a CUDA GPU, each with its reason."""

from __future__ import annotations

from ascend_core.deployment import Deployment
from ascend_core.errors import ConfigError
from ascend_core.plan import fields
from ascend_core.plan.result import Draft

# KV cache element types the Ascend attention kernels (and the host reference) read.
# Everything else vLLM accepts (fp8 variants, nvfp4, turboquant, ...) is a CUDA/ROCm format.
SUPPORTED_KV_CACHE_DTYPES = frozenset({"auto", "bfloat16", "float16"})


def fix_gpu_only_settings(deployment: Deployment, draft: Draft) -> Draft:
    """Custom all-reduce off, our custom ops on, GPU-only KV cache dtypes refused."""
    if deployment.parallel.tp > 1 and not deployment.parallel.disable_custom_all_reduce:
        draft = draft.change(
            fields.CUSTOM_ALL_REDUCE,
            False,
            True,
            "vLLM's custom all-reduce is a CUDA IPC kernel; Ascend reduces through HCCL",
        )
    draft = _enable_custom_ops(deployment, draft)
    dtype = deployment.cache.kv_cache_dtype
    if dtype not in SUPPORTED_KV_CACHE_DTYPES:
        draft = draft.fail(
            ConfigError(
                f"cache_config.cache_dtype={dtype!r} (--kv-cache-dtype) is a GPU-only KV "
                f"cache format; Ascend supports {sorted(SUPPORTED_KV_CACHE_DTYPES)}.",
                "Drop --kv-cache-dtype or set it to 'auto'; to shrink the KV cache on Ascend "
                "use a model whose quantization description quantizes the KV cache.",
            )
        )
    return draft


def _enable_custom_ops(deployment: Deployment, draft: Draft) -> Draft:
    ops = deployment.compilation.custom_ops
    if "all" in ops:
        return draft.decide(custom_ops=ops)
    # vLLM writes 'none' into custom_ops itself (before the platform hook runs) when
    # Inductor compiles, expecting Inductor to fuse the native ops into GPU kernels; there
    # is no such code generation for the NPU, so our kernels must stay on. A 'none' here
    # is indistinguishable from vLLM's default, so it is replaced too; per-op '+name' and
    # '-name' entries are kept, and '-name' is how a user turns one kernel off.
    new = ("all", *(op for op in ops if op != "none"))
    return draft.change(
        fields.CUSTOM_OPS,
        ops,
        new,
        "the Ascend kernels are vLLM custom ops; vLLM's default turns them off when "
        "Inductor compiles, and Inductor generates no NPU kernels (use '-name' to turn "
        "one off)",
    ).decide(custom_ops=new)
