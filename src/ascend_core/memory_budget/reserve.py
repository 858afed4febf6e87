"""The estimated per-device reserve: runtime buffers and peak activations."""

from __future__ import annotations

from attrs import frozen

from ascend_core.deployment import ModelFacts
from ascend_core.memory_budget.units import GIB, format_bytes

# What a device holds besides weights and KV cache, when nothing has been measured:
# the CANN runtime and operator workspaces, HCCL buffers and captured graphs.
RUNTIME_RESERVE_BYTES = 2 * GIB
# Peak activation bytes per scheduled token, in units of hidden_size x dtype bytes: the
# residual, QKV, attention output and a gated MLP's intermediate (~3.5 x hidden, twice)
# are alive together; 12 covers that with headroom for the sampler's logits.
ACTIVATION_FACTOR = 12


@frozen
class Reserve:
    """Per-device memory kept out of the KV cache besides weights, with where it comes from."""

    runtime_bytes: int
    activation_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.runtime_bytes + self.activation_bytes

    def describe(self) -> str:
        return (
            f"{format_bytes(self.runtime_bytes)} runtime/HCCL/graphs + "
            f"{format_bytes(self.activation_bytes)} activations"
        )


def estimate_reserve(
    model: ModelFacts, max_num_batched_tokens: int, activation_dtype_bytes: int, tp: int = 1
) -> Reserve:
    """The doctor's estimate of what vLLM's profiling run would measure."""
    per_token = ACTIVATION_FACTOR * model.hidden_size * activation_dtype_bytes
    activations = max_num_batched_tokens * per_token // max(1, tp)
    return Reserve(RUNTIME_RESERVE_BYTES, activations)
