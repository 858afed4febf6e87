"""A seeded request's noise on the NPU: a function of (seed, position), not a generator.

vLLM's random_sample draws each seeded row's Exp(1) noise from the request's own
torch.Generator, one launch per seeded row, with host-held state a graph cannot replay.
On the NPU the runner names each row's counter for the step (the position of the token
it samples: the sequence's length once this step's tokens are in), and the noise of a
seeded row is the sampling port's `exponential_noise` of its key (`row_keys(seed,
counter)`, made on the host): the same tokens for the same seed in any batch, whether the
step ran eagerly or from a graph's replay (where the runner's sampled tail computes the
same noise), and a chunked prompt's discarded samples leave nothing to rewind. Rows
without a seed keep vLLM's `exponential_()`.

Without counters (a caller other than the NPU runner) vLLM's way is taken unchanged.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

from adapters.torch.counter_noise import row_keys
from adapters.vllm.patches._symbols import rebind, resolve

if TYPE_CHECKING:
    from collections.abc import Iterator

    import numpy as np
    import torch

    from ascend_core.patches import PatchSpec

# The step's counters, one per batch row (host int64), while the runner samples.
_counters: list[np.ndarray] = []


@contextmanager
def sample_counters(counters: np.ndarray) -> Iterator[None]:
    """Within it, a seeded row b's noise is keyed by counters[b]."""
    _counters.append(counters)
    try:
        yield
    finally:
        _counters.pop()


def seeded_rows(generators: dict[int, torch.Generator]) -> tuple[list[int], list[int]]:
    """(rows, seeds) of the batch's seeded requests, by row."""
    rows = sorted(generators)
    return rows, [generators[row].initial_seed() for row in rows]


def use_counter_noise_for_seeds(spec: PatchSpec) -> None:
    original = resolve(spec.target)
    if getattr(original, "__ascend_patch__", None) == spec.id:
        return
    from vllm.v1.sample.ops.topk_topp_sampler import (
        empty_exponential_noise_like,
        sample_with_exponential_noise,
    )

    from adapters.container import container

    sampling_ops = container().sampling_ops

    def random_sample(
        probs: torch.Tensor, generators: dict[int, torch.Generator], use_fp64_gumbel: bool = False
    ) -> torch.Tensor:
        if not generators or not _counters:
            return original(probs, generators, use_fp64_gumbel)
        import torch

        rows, seeds = seeded_rows(generators)
        counters = _counters[-1]
        # The seeded rows' keys made on the host (a few B-long ops), sent in one copy.
        keys = row_keys(
            torch.tensor(seeds, dtype=torch.int64),
            torch.tensor([int(counters[row]) for row in rows], dtype=torch.int64),
        ).to(probs.device, non_blocking=True)
        noise = sampling_ops().exponential_noise(keys, probs.shape[-1])
        q = empty_exponential_noise_like(probs, use_fp64_gumbel)
        if len(rows) == probs.shape[0]:
            q.copy_(noise)
        else:
            q.exponential_()
            index = torch.tensor(rows, dtype=torch.int64).to(probs.device, non_blocking=True)
            q.index_copy_(0, index, noise.to(q.dtype))
        return sample_with_exponential_noise(probs, q)

    random_sample.__ascend_patch__ = spec.id  # type: ignore[attr-defined]
    random_sample.__wrapped__ = original  # type: ignore[attr-defined]
    rebind(spec.symbols(), random_sample)

