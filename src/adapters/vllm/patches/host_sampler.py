"""Greedy sampling through the sampling port (on the host: the native argmax where built).

vLLM's sampler takes `logits.argmax(dim=-1)` on an out-of-tree platform (its own CPU
platform calls its CPU build's argmax kernel); the port gives the same answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from adapters.container import container
from adapters.vllm.patches._symbols import holder_and_attr, resolve

if TYPE_CHECKING:
    import torch

    from ascend_core.patches import PatchSpec
    from ports.sampling import SamplingOps


def greedy_sample_with(sampling: SamplingOps) -> Callable[[torch.Tensor], torch.Tensor]:
    """vLLM's Sampler.greedy_sample on the port."""

    def greedy_sample(logits: torch.Tensor) -> torch.Tensor:
        return sampling.greedy(logits)

    return greedy_sample


def use_native_greedy_argmax(spec: PatchSpec) -> None:
    original = resolve(spec.target)
    if getattr(original, "__ascend_patch__", None) == spec.id:
        return
    greedy_sample = greedy_sample_with(container().sampling_ops())
    greedy_sample.__ascend_patch__ = spec.id  # type: ignore[attr-defined]
    greedy_sample.__wrapped__ = original  # type: ignore[attr-defined]
    holder, attr = holder_and_attr(spec.target)
    setattr(holder, attr, staticmethod(greedy_sample))  # the sampler calls self.greedy_sample
