"""The graph capture sizes vLLM settles before the plan runs, for the doctor to plan with.

`vllm serve` fills unset `cudagraph_capture_sizes` in VllmConfig._set_cudagraph_sizes
(vLLM 0.33, config/vllm.py) before the platform hook, so the plan sees them as given; the
doctor, which builds no VllmConfig, computes the same list here and hands it to the plan.
With speculative decoding and full decode graphs vLLM rounds them to whole verify batches
once the attention backends are known (full_decode_sizes).
"""

from __future__ import annotations

from collections.abc import Iterable

# vLLM's default ceiling for captured batch sizes (1024 only on CUDA capability 10.x).
DEFAULT_MAX_CAPTURE_SIZE = 512


def default_capture_sizes(
    max_num_seqs: int, max_num_batched_tokens: int, decode_query_len: int = 1
) -> tuple[int, ...]:
    """vLLM's default sizes: 1, 2, 4, then every 8 below 256, every 16 from 256, up to
    min(2 x max_num_seqs x decode_query_len, 512, max_num_batched_tokens), with
    max_num_batched_tokens added when it fits, and the uniform decode batches: with one
    token a request max_num_seqs, with speculative decoding (decode_query_len = 1 + k)
    the request counts 1, 2, 4, 8, 16, ... up to max_num_seqs, each times 1 + k, that fit
    under 512 (static k; vLLM's dynamic speculative tiers are not modelled)."""
    q = decode_query_len
    largest = min(max_num_seqs * q * 2, DEFAULT_MAX_CAPTURE_SIZE)
    if q == 1:
        uniform_decode = [max_num_seqs] if max_num_seqs <= largest else []
    else:
        uniform_decode = sorted({n * q for n in _request_counts(max_num_seqs) if n * q <= largest})
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


def _request_counts(max_reqs: int) -> list[int]:
    """vLLM's request-count grid for speculative decode sizes (config/vllm.py)."""
    max_reqs = min(max_reqs, DEFAULT_MAX_CAPTURE_SIZE)
    counts = [n for n in (1, 2, 4) if n <= max_reqs]
    counts += range(8, min(max_reqs + 1, 256), 8)
    counts += range(256, max_reqs + 1, 16)
    return sorted({*counts, max_reqs})


def full_decode_sizes(sizes: tuple[int, ...], decode_query_len: int) -> tuple[int, ...]:
    """The sizes vLLM keeps when it captures full decode graphs with speculative decoding
    (CompilationConfig.adjust_cudagraph_sizes_for_spec_decode): each rounded up to a
    multiple of 1 + k (a uniform verify batch is whole requests), none past the largest
    size; only 1 + k itself when every size rounds past it."""
    q = decode_query_len
    if q <= 1 or not sizes:
        return sizes
    ceiling = max(sizes)
    rounded = tuple(sorted({-(-s // q) * q for s in sizes if -(-s // q) * q <= ceiling}))
    if not rounded and q <= ceiling:
        return (q,)
    return rounded


def given_capture_sizes(sizes: Iterable[int], max_num_batched_tokens: int) -> tuple[int, ...]:
    """The operator's sizes as vLLM keeps them: once each, ascending, none above
    max_num_batched_tokens."""
    return tuple(sorted({int(s) for s in sizes if int(s) <= max_num_batched_tokens}))
