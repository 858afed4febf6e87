"""The graph capture sizes vLLM settles before the plan runs, for the doctor to plan with.

`vllm serve` fills unset `cudagraph_capture_sizes` in VllmConfig._set_cudagraph_sizes
(vLLM 0.33, config/vllm.py) before the platform hook, so the plan sees them as given; the
doctor, which builds no VllmConfig, computes the same list here and hands it to the plan.
"""

from __future__ import annotations

from collections.abc import Iterable

# vLLM's default ceiling for captured batch sizes (1024 only on CUDA capability 10.x).
DEFAULT_MAX_CAPTURE_SIZE = 512


def default_capture_sizes(
    max_num_seqs: int, max_num_batched_tokens: int, decode_query_len: int = 1
) -> tuple[int, ...] | None:
    """vLLM's default sizes: 1, 2, 4, then every 8 below 256, every 16 from 256, up to
    min(2 x max_num_seqs, 512, max_num_batched_tokens), with max_num_seqs and
    max_num_batched_tokens added when they fit.

    None with speculative decoding (decode_query_len > 1): vLLM then adds its decode
    tiers, which depend on the drafter's schedule; it logs the sizes it captures."""
    if decode_query_len != 1:
        return None
    largest = min(max_num_seqs * 2, DEFAULT_MAX_CAPTURE_SIZE)
    uniform_decode = [max_num_seqs] if max_num_seqs <= largest else []
    largest = min(max_num_batched_tokens, largest)
    sizes = [s for s in (1, 2, 4) if s <= largest]
    if largest >= 8:
        sizes += range(8, min(largest + 1, 256), 8)
    if largest >= 256:
        sizes += range(256, largest + 1, 16)
    if max_num_batched_tokens <= largest:
        sizes.append(max_num_batched_tokens)
    sizes += [s for s in uniform_decode if s <= max_num_batched_tokens]
    return tuple(sorted(set(sizes)))


def given_capture_sizes(sizes: Iterable[int], max_num_batched_tokens: int) -> tuple[int, ...]:
    """The operator's sizes as vLLM keeps them: once each, ascending, none above
    max_num_batched_tokens."""
    return tuple(sorted({int(s) for s in sizes if int(s) <= max_num_batched_tokens}))
