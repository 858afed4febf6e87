"""Seeded requests: each step's counters keying their noise, and, on generators without
offsets, the discarded sample undone by state.

SampleCountersMixin names the step's counters (each row's sequence length once the
step's tokens are in: the position its sampled token takes) while vLLM's sampler runs,
so a seeded row's noise is a function of (seed, position) (the `seeded-counter-noise`
patch, adapters/vllm/patches/seeded_noise.py) on both devices: the host's tokens are the
NPU's, eager or replayed.

vLLM's runner samples a token for every scheduled request, then discards it for a
request still in its (chunked) prefill, and rewinds that request's own generator with
`set_offset(get_offset() - 4)` so its seeded stream does not depend on how the prompt
was chunked. That rewind assumes a Philox generator (CUDA's). torch's CPU generator (the
host device's, and the emulated NPU's) has no offset and raises "CPU Generator does not
use offset", which kills the engine at the first seeded request with a chunked prompt.

For such a generator the runner keeps its state before sampling and puts it back
instead; a generator that has an offset keeps vLLM's rewind.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from adapters.vllm.patches.seeded_noise import sample_counters


def uses_offset(generator: torch.Generator) -> bool:
    """Whether vLLM's offset rewind works on this generator."""
    try:
        generator.get_offset()
    except RuntimeError:
        return False
    return True


class SeededRewindMixin:
    """Mixed in before vLLM's GPUModelRunner (or a subclass): _sample keeps the states,
    _bookkeeping_sync restores them and hides those generators from vLLM's rewind."""

    input_batch: Any
    discard_request_mask: Any
    _seeded_states: dict[int, torch.Tensor]

    def _sample(self, *args: Any, **kwargs: Any) -> Any:
        generators = self.input_batch.generators
        self._seeded_states = {}
        if generators:
            num_reqs = self.input_batch.num_reqs
            for i in np.nonzero(self.discard_request_mask.np[:num_reqs])[0]:
                gen = generators.get(int(i))
                if gen is not None and not uses_offset(gen):
                    self._seeded_states[int(i)] = gen.get_state()
        return super()._sample(*args, **kwargs)  # type: ignore[misc]

    def _bookkeeping_sync(self, *args: Any, **kwargs: Any) -> Any:
        states, self._seeded_states = getattr(self, "_seeded_states", {}), {}
        generators = self.input_batch.generators
        held: dict[int, torch.Generator] = {}
        for i, state in states.items():
            gen = generators.pop(i, None)
            if gen is not None:
                gen.set_state(state)
                held[i] = gen
        try:
            return super()._bookkeeping_sync(*args, **kwargs)  # type: ignore[misc]
        finally:
            generators.update(held)


class SampleCountersMixin:
    """Mixed in before vLLM's GPUModelRunner (or a subclass): _sample runs vLLM's sampler
    with the step's counters named (optimistic_seq_lens_cpu: computed + scheduled)."""

    input_batch: Any
    optimistic_seq_lens_cpu: torch.Tensor

    def _sample(self, *args: Any, **kwargs: Any) -> Any:
        counters = self.optimistic_seq_lens_cpu[: self.input_batch.num_reqs].numpy()
        with sample_counters(counters):
            return super()._sample(*args, **kwargs)  # type: ignore[misc]
