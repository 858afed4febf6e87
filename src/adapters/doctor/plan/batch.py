"""The batch limits `vllm serve` runs with: the operator's, or vLLM's defaults by device
memory (what the doctor's Deployment, memory budget and graph sizes assume)."""

from __future__ import annotations

from adapters.doctor.serve_args import ServeArgs
from ascend_core.memory_budget import GIB

# vLLM's `vllm serve` --max-num-batched-tokens for an out-of-tree platform
# (EngineArgs.get_batch_defaults, OPENAI_API_SERVER), by device memory.
SERVE_BATCHED_TOKENS = ((160 * GIB, 16384), (70 * GIB, 8192), (0, 2048))

# vLLM's `vllm serve` default --max-num-seqs for an out-of-tree platform
# (EngineArgs.get_batch_defaults, OPENAI_API_SERVER): 1024 on a device of at least
# 70 GiB, else 256; never above max_num_batched_tokens.
LARGE_DEVICE_BYTES = 70 * GIB
DEFAULT_MAX_NUM_SEQS = (256, 1024)


def serve_max_num_seqs(args: ServeArgs, device_memory_bytes: int) -> int:
    """--max-num-seqs, or the value `vllm serve` defaults it to on this device."""
    if args.max_num_seqs:
        return int(args.max_num_seqs)
    small, large = DEFAULT_MAX_NUM_SEQS
    seqs = large if device_memory_bytes >= LARGE_DEVICE_BYTES else small
    if args.max_num_batched_tokens:
        seqs = min(seqs, int(args.max_num_batched_tokens))
    return seqs


def serve_max_num_batched_tokens(args: ServeArgs, device_memory_bytes: int) -> int:
    """--max-num-batched-tokens, or what `vllm serve` defaults it to on this device."""
    if args.max_num_batched_tokens:
        return int(args.max_num_batched_tokens)
    return next(n for floor, n in SERVE_BATCHED_TOKENS if device_memory_bytes >= floor)
