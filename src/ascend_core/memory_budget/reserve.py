"""The estimated per-device reserve: runtime buffers and peak activations."""

from __future__ import annotations

from collections.abc import Iterable

from attrs import frozen

from ascend_core.deployment import ModelFacts
from ascend_core.memory_budget.units import GIB, format_bytes
from ports.model_files import TensorHeader

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
    lora_bytes: int = 0  # --enable-lora: vLLM's stacked adapter slots (lora_slot_bytes)
    # A vision tower: the encoder cache and the tower's profiled activations (EncoderBudget).
    encoder_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return self.runtime_bytes + self.activation_bytes + self.lora_bytes + self.encoder_bytes

    def describe(self) -> str:
        lora = f" + {format_bytes(self.lora_bytes)} LoRA slots" if self.lora_bytes else ""
        encoder = (f" + {format_bytes(self.encoder_bytes)} encoder cache and tower activations"
                   if self.encoder_bytes else "")
        return (
            f"{format_bytes(self.runtime_bytes)} runtime/HCCL/graphs + "
            f"{format_bytes(self.activation_bytes)} activations{lora}{encoder}"
        )


# The linear layers vLLM's LoRA wraps in a dense decoder, by their checkpoint names: the
# column-parallel ones (output split over TP) and the row-parallel ones (input split).
LORA_COLUMN = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
LORA_ROW = ("o_proj", "down_proj")
# The vocabulary-parallel ones (vocab split over TP), wrapped too: [vocab, hidden].
LORA_VOCAB = ("embed_tokens", "lm_head")


def lora_slot_bytes(
    headers: Iterable[TensorHeader], max_loras: int, max_lora_rank: int, dtype_bytes: int,
    tp: int = 1,
) -> int:
    """What vLLM allocates per device for --enable-lora before any adapter loads: per
    wrapped linear [out, in], A [max_loras, rank, in] and B [max_loras, out, rank], the
    TP-split side divided by tp (in the LoRA dtype, the model's by default). The
    embedding and lm_head count as they appear in the headers (a tied lm_head has none)."""
    total = 0
    for header in headers:
        parts = header.name.split(".")
        if len(header.shape) != 2 or len(parts) < 2 or parts[-1] != "weight":
            continue
        out, inp = header.shape
        if parts[-2] in LORA_COLUMN:
            total += max_lora_rank * (inp + out // tp)
        elif parts[-2] in LORA_ROW:
            total += max_lora_rank * (inp // tp + out)
        elif parts[-2] in LORA_VOCAB:
            total += max_lora_rank * (out // tp + inp)
    return total * max_loras * dtype_bytes


def estimate_reserve(
    model: ModelFacts,
    max_num_batched_tokens: int,
    activation_dtype_bytes: int,
    tp: int = 1,
    lora_bytes: int = 0,
    encoder_bytes: int = 0,
) -> Reserve:
    """The doctor's estimate of what vLLM's profiling run would measure (the LoRA slots,
    lora_slot_bytes, when --enable-lora: the worker's measured peak holds them)."""
    per_token = ACTIVATION_FACTOR * model.hidden_size * activation_dtype_bytes
    activations = max_num_batched_tokens * per_token // max(1, tp)
    return Reserve(RUNTIME_RESERVE_BYTES, activations, lora_bytes, encoder_bytes)
