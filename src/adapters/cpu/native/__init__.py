"""The host's native kernels (decode attention, KV write, packed GEMM, MoE routing and
experts, greedy argmax, slot mapping): built from the .cpp files here on first use.

Compiled with torch.utils.cpp_extension into torch's extensions directory (cached
there; rebuilt when the source or flags change). Where there is no compiler or the
build fails, `decode_attention()` returns None once the reason is logged at INFO, and
the host keeps its torch path.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger("vllm.plugins.ascend")

_SOURCES = [
    Path(__file__).with_name(name)
    for name in (
        "decode_attention.cpp",
        "kv_write.cpp",
        "packed_linear.cpp",
        "small_gemm.cpp",
        "panel_gemm.cpp",
        "panel_gemm_amx.cpp",
        "moe_experts.cpp",
        "moe_experts_amx.cpp",
        "moe_route.cpp",
        "greedy_argmax.cpp",
        "slot_mapping.cpp",
    )
]
# -fopenmp compiles at::parallel_for's OpenMP loop and the simd reductions; nothing
# links its own OpenMP runtime: the symbols resolve to the one libtorch_cpu loaded.
_CFLAGS = ["-O3", "-march=native", "-fopenmp"]

DecodeKernel = Callable[..., None]
KvWriteKernel = Callable[..., None]
MoeExpertsKernel = Callable[..., torch.Tensor]
MoeRouteKernel = Callable[..., tuple[torch.Tensor, torch.Tensor]]
_library: object | None = None  # torch.ops.ascend_host_native once built
_tried = False
_dot_dtypes: frozenset[torch.dtype] = frozenset()  # the build's dot kernels (has_dot_kernel)


def decode_attention() -> DecodeKernel | None:
    """torch.ops.ascend_host_native.decode_attention, or None where it cannot be built.

    Signature: (out, query, key_cache, value_cache, block_table, seq_lens, scale), with
    query/out [B, Hq, D] and caches [blocks, block_size, Hk, D] of one dtype (bf16 or
    float32; head dim contiguous), block_table [>=B, max_blocks] and seq_lens [>=B]
    int64. Float32 inside, one rounding at the output.
    """
    library = _built()
    return None if library is None else library.decode_attention  # type: ignore[attr-defined]


def write_kv_cache() -> KvWriteKernel | None:
    """torch.ops.ascend_host_native.write_kv_cache, or None where it cannot be built.

    Signature: (key, value, key_cache, value_cache, slot_mapping) -> bool, with key/value
    [>=T, Hk, D], caches [blocks, block_size, Hk, D] (any strides), slot_mapping [T]
    int64 or int32 (-1: skipped). A plain copy; False (nothing written) where it does not
    apply: a dtype cast, a head dim that is not contiguous, another device.
    """
    library = _built()
    return None if library is None else library.write_kv_cache  # type: ignore[attr-defined]


def packed_linear() -> Any | None:
    """torch.ops.ascend_host_native.packed_linear.default, or None where it cannot be built.

    Signature: (x, weight, bias) -> x @ weight.T + bias, float32 or bf16 on a CPU with
    oneDNN. One or two rows of x: the small GEMM over the dense weight (small_gemm.cpp,
    where this CPU's build has it). 3 to 64 rows: the panel GEMM over the weight packed
    into panels (panel_gemm.cpp, where the build has it), and oneDNN over the dense
    weight past that; a weight the panel GEMM does not take: oneDNN over the weight
    packed into its layout. Each pack is made once and cached by the op (again after an
    in-place change). A meta kernel gives its shape under torch.compile.
    """
    library = _built()
    return None if library is None else library.packed_linear.default  # type: ignore[attr-defined]


def pack_linear_weight() -> Any | None:
    """torch.ops.ascend_host_native.pack_linear_weight.default, or None where it cannot be
    built: (weight) -> the pack packed_linear reads for it (panels for a contiguous weight
    where the build has the panel GEMM for its dtype, else oneDNN's layout), from its
    cache or packed into it now."""
    library = _built()
    return None if library is None else library.pack_linear_weight.default  # type: ignore[attr-defined]


def moe_experts() -> MoeExpertsKernel | None:
    """torch.ops.ascend_host_native.moe_experts, or None where it cannot be built.

    Signature: (hidden, local_ids, weights, w13, w2) -> out, with hidden/out [T, H],
    local_ids [T, k] (-1: an expert on another rank, left out), weights [T, k] float32,
    w13 [E, 2I, H] and w2 [E, H, I]: each token's slots through their experts' SwiGLU
    MLPs, summed with the weights (CpuMoeOps' permute, grouped_mlp and unpermute, with
    its roundings). A functional op with a Meta kernel, so a compiled graph can call
    it; it raises for inputs `moe_experts_takes` declines, so check that first.
    """
    library = _built()
    return None if library is None else library.moe_experts  # type: ignore[attr-defined]


def moe_experts_takes(
    hidden: torch.Tensor,
    local_ids: torch.Tensor,
    weights: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
) -> bool:
    """Whether moe_experts takes these inputs: CPU tensors; hidden [T, H] with contiguous
    rows, of a dtype this CPU's build has a dot kernel for (float32, bf16 with AVX-512
    BF16); w13 [E, 2I, H] and w2 [E, H, I] contiguous, of hidden's dtype; local_ids int32
    or int64 and weights float32, both contiguous [T, k]. Metadata only, so a compiled
    graph guards on it rather than calling anything."""
    return (
        moe_experts_take_weights(w13, w2)
        and hidden.dtype == w13.dtype
        and hidden.device.type == "cpu"
        and hidden.dim() == 2
        and hidden.stride(1) == 1
        and local_ids.dtype in (torch.int32, torch.int64)
        and local_ids.dim() == 2
        and local_ids.is_contiguous()
        and weights.dtype == torch.float32
        and weights.is_contiguous()
    )


def moe_experts_take_weights(w13: torch.Tensor, w2: torch.Tensor) -> bool:
    """moe_experts_takes' part that depends on the layer's weights alone."""
    return (
        w13.dtype in _dot_dtypes
        and w2.dtype == w13.dtype
        and w13.device.type == "cpu"
        and w13.dim() == 3
        and w2.dim() == 3
        and w13.is_contiguous()
        and w2.is_contiguous()
    )


def moe_route() -> MoeRouteKernel | None:
    """torch.ops.ascend_host_native.moe_route, or None where it cannot be built.

    Signature: (router_logits [T, E], top_k, sigmoid, renormalize, routed_scaling_factor)
    -> (weights [T, k] float32, ids [T, k] int32): plain top-k routing (no expert groups,
    no correction bias) with CpuMoeOps.route's bits, torch's softmax, sigmoid and topk.
    """
    library = _built()
    return None if library is None else library.moe_route  # type: ignore[attr-defined]


def greedy_argmax() -> Callable[[torch.Tensor], torch.Tensor] | None:
    """torch.ops.ascend_host_native.greedy_argmax, or None where it cannot be built.

    (logits [B, V] float32, rows contiguous) -> [B] int64: torch.argmax(dim=-1)'s answer
    (the first index of the maximum, or of the first NaN); other inputs raise.
    """
    library = _built()
    return None if library is None else library.greedy_argmax  # type: ignore[attr-defined]


def compute_slot_mapping() -> Callable[..., None] | None:
    """torch.ops.ascend_host_native.compute_slot_mapping, or None where it cannot be built.

    (num_tokens, max_num_tokens, query_start_loc, positions, block_table,
    block_table_stride, slot_mapping, block_size, pad_id) -> None: vLLM's slot-mapping
    kernel's contract (adapters/vllm/kernels.py) on contiguous int32/int64 CPU tensors,
    written into slot_mapping; other inputs, and a position past its block table, raise.
    """
    library = _built()
    return None if library is None else library.compute_slot_mapping  # type: ignore[attr-defined]


def _built() -> object | None:
    global _library, _tried, _dot_dtypes
    if not _tried:
        _tried = True
        _library = _build()
        if _library is not None:
            has = _library.has_dot_kernel  # type: ignore[attr-defined]
            _dot_dtypes = frozenset(
                dtype for dtype in (torch.float32, torch.bfloat16, torch.float16) if has(dtype)
            )
    return _library


def _build() -> object | None:
    try:
        from torch.utils import cpp_extension

        cpp_extension.load(
            name=f"vllm_ascend_host_native_{_cpu_key()}",
            sources=[str(source) for source in _SOURCES],
            extra_cflags=_CFLAGS,
            is_python_module=False,
            verbose=False,
        )
        return torch.ops.ascend_host_native
    except Exception as exc:  # no compiler, no headers, a failed build: keep the torch path
        logger.info(
            "Host native kernels unavailable (%s: %s); the host attends with torch's SDPA, "
            "writes the KV cache with index_put_, packs GEMM weights in Python and runs MoE "
            "experts one torch matmul pair at a time instead.",
            type(exc).__name__,
            str(exc).strip().splitlines()[-1] if str(exc).strip() else "",
        )
        return None


def _cpu_key(cpuinfo: str | None = None) -> str:
    """A short key of this CPU's model and instruction-set flags (/proc/cpuinfo).

    The build is `-march=native`, and torch keys its cache by name, sources and flags
    only: a shared extensions directory (a home on NFS, a container image) would hand a
    build for one CPU to another, which can stop on an illegal instruction. Naming the
    build after the CPU makes each CPU kind build its own.
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return "unknown"
    lines = cpuinfo.splitlines()
    wanted = ("model name", "flags", "Features", "CPU part")  # x86 and Arm spellings
    facts = sorted({line for line in lines if line.split(":")[0].strip() in wanted})
    return hashlib.sha256("\n".join(facts).encode()).hexdigest()[:12]
