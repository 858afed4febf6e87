"""VLLM_ASCEND_* variables vllm-ascend reads that this build registers without acting on them.

Types and defaults follow vllm_ascend/envs.py (env_variables); each carries the reason it
has no effect here, and the plan warns once for each one that is set.
"""

from __future__ import annotations

import enum
from typing import Any

from ascend_core.env.variables import EnvVar, bool_var, choice_var, int_var


class BatchMemcpy(enum.Enum):
    """VLLM_ASCEND_ENABLE_BATCH_MEMCPY: unset lets the build detect it from CANN's headers."""

    AUTO = "auto"
    ON = "1"
    OFF = "0"


_NO_KERNEL = "this build has no kernel for it"

FLASHCOMM2_PARALLEL_SIZE = int_var(
    "VLLM_ASCEND_FLASHCOMM2_PARALLEL_SIZE",
    0,
    "FlashComm2: the o_proj tensor-parallel group size; 0 turns it off.",
    minimum=0,
    no_effect=_NO_KERNEL,
)
ENABLE_FUSED_MC2 = int_var(
    "VLLM_ASCEND_ENABLE_FUSED_MC2",
    0,
    "Fused MC2 MoE communication: 0 off, 1 dispatch_ffn_combine, 2 MegaMoE "
    "(fallback of additional_config.enable_fused_mc2).",
    choices=(0, 1, 2),
    no_effect="fused MC2 is a vllm-ascend kernel this build does not have",
)
FUSION_OP_TRANSPOSE_KV_CACHE_BY_BLOCK = bool_var(
    "VLLM_ASCEND_FUSION_OP_TRANSPOSE_KV_CACHE_BY_BLOCK",
    True,
    "Fused transpose_kv_cache_by_block op for KV transfer "
    "(fallback of additional_config.enable_transpose_kv_cache_by_block).",
    no_effect=_NO_KERNEL,
)
ENABLE_BATCH_MEMCPY = choice_var(
    "VLLM_ASCEND_ENABLE_BATCH_MEMCPY",
    BatchMemcpy,
    BatchMemcpy.AUTO,
    "aclrtMemcpyBatchAsync for KV cache offloading: 1 on, 0 off, unset detect.",
    no_effect="this build does not offload the KV cache",
)
SFA_SORT_TOPK = bool_var(
    "VLLM_ASCEND_SFA_SORT_TOPK",
    True,
    "Sort sparse-attention top-k indices before use, for a layout-independent sum order.",
    no_effect="this build has no sparse (SFA) attention backend",
)
ENABLE_CONTEXT_PARALLEL = bool_var(
    "VLLM_ASCEND_ENABLE_CONTEXT_PARALLEL",
    False,
    "Context parallelism in older vllm-ascend releases.",
    no_effect="context parallelism follows vLLM's prefill/decode_context_parallel_size",
)
MLP_GATE_UP_PREFETCH_SIZE = int_var(
    "VLLM_ASCEND_MLP_GATE_UP_PREFETCH_SIZE",
    18 * 1024 * 1024,
    "Bytes of gate_up weights prefetched (VLLM_ASCEND_ENABLE_PREFETCH_MLP).",
    minimum=0,
    no_effect="this build does not prefetch weights",
)
MLP_DOWN_PREFETCH_SIZE = int_var(
    "VLLM_ASCEND_MLP_DOWN_PREFETCH_SIZE",
    18 * 1024 * 1024,
    "Bytes of down_proj weights prefetched (VLLM_ASCEND_ENABLE_PREFETCH_MLP).",
    minimum=0,
    no_effect="this build does not prefetch weights",
)
ENABLE_TOPK_TOPP_OPTIMIZATION = bool_var(
    "VLLM_ASCEND_ENABLE_TOPK_TOPP_OPTIMIZATION",
    True,
    "NPU top-k/top-p sampling kernel.",
    no_effect="sampling uses vLLM's sampler",
)
KV_CACHE_MEGABYTES_FLOATING_TOLERANCE = int_var(
    "VLLM_ASCEND_KV_CACHE_MEGABYTES_FLOATING_TOLERANCE",
    64,
    "MB by which a measured KV cache size may differ from a cached one and still reuse it.",
    minimum=0,
    no_effect="this build sizes the KV cache once, with no cached size to compare",
)

REFERENCE_ONLY_VARS: tuple[EnvVar[Any], ...] = (
    FLASHCOMM2_PARALLEL_SIZE,
    ENABLE_FUSED_MC2,
    FUSION_OP_TRANSPOSE_KV_CACHE_BY_BLOCK,
    ENABLE_BATCH_MEMCPY,
    SFA_SORT_TOPK,
    ENABLE_CONTEXT_PARALLEL,
    MLP_GATE_UP_PREFETCH_SIZE,
    MLP_DOWN_PREFETCH_SIZE,
    ENABLE_TOPK_TOPP_OPTIMIZATION,
    KV_CACHE_MEGABYTES_FLOATING_TOLERANCE,
)

# Names older vllm-ascend releases read (vllm_ascend/envs.py of those releases) that its
# current envs.py no longer has: the doctor says so instead of "unknown".
RETIRED_REFERENCE_VARS: tuple[tuple[str, str], ...] = (
    ("VLLM_ASCEND_ENABLE_TOPK_OPTIMIZE", "the top-k sampling optimisation"),
    ("VLLM_ASCEND_TRACE_RECOMPILES", "tracing torch recompilations"),
    ("VLLM_ASCEND_ENABLE_DBO", "dual-batch overlap"),
    (
        "VLLM_ASCEND_MODEL_EXECUTE_TIME_OBSERVE",
        "model execution timing (NPU event timestamps per stage); here --profiler-config "
        "with profiler=torch records each step's host ops and NPU kernels (torch_npu's "
        "profiler)",
    ),
    ("VLLM_ASCEND_MLA_PA", "the MLA paged-attention decode path"),
    ("VLLM_ASCEND_ENABLE_MLP_OPTIMIZE", "the tensor-parallel MLP optimisation"),
    ("VLLM_ASCEND_ENABLE_CHUNK_MC2", "chunked MC2 in prefill"),
    ("VLLM_ASCEND_FUSED_MOE_MC2_CHUNK_SIZE", "the MC2 prefill chunk size"),
    ("VLLM_ASCEND_LLMDD_RPC_IP", "the LLMDataDist connector's RPC address"),
    ("VLLM_ASCEND_LLMDD_RPC_PORT", "the LLMDataDist connector's RPC port"),
)
