"""vLLM's punica wrapper for our devices: its LoRA layers' shrink and expand on the
LoRA port (ports/lora.py) of the serving device.

vLLM keeps the batch's mapping (each token's adapter slot, -1 for none) in persistent
buffers (PunicaWrapperBase.update_metadata); every op here reads the first rows of those
buffers as many as the layer's input has, so prefill, decode and a mixed batch take one
path, and a padded batch (a captured graph) reads the padding's stale, in-range slots
whose rows are dropped later. The buffers start at -1 so no row reads uninitialized
memory. A step's slots are made on the host (`update_metadata`): nothing is read back
from the device for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from vllm.lora.punica_wrapper.punica_base import PunicaWrapperBase
from vllm.utils.torch_utils import PIN_MEMORY

from adapters.container import container

if TYPE_CHECKING:
    from vllm.lora.layers import LoRAMapping


class AscendPunicaWrapper(PunicaWrapperBase):
    """Multi-LoRA for a batch whose rows use different adapters (or none)."""

    def __init__(
        self,
        max_num_batched_tokens: int,
        max_batches: int,
        device: torch.device | str,
        **kwargs: Any,
    ) -> None:
        PunicaWrapperBase.__init__(self, max_num_batched_tokens, max_batches, device)
        self.lora_ops = container().lora_ops()
        self._token_lora_indices.fill_(-1)
        self._sampler_indices.fill_(-1)

    def update_metadata(
        self,
        mapping: LoRAMapping,
        lora_index_to_id: list[int | None],
        max_loras: int,
        vocab_size: int,
        **kwargs: Any,
    ) -> None:
        """The step's slots, made on the host and sent in one copy, then written in place
        into vLLM's four index buffers (what PunicaWrapperBase._update_base_metadata
        writes, there with device ops). Not the prefill metadata the base class adds for
        vLLM's SGMV kernels (compute_meta: `unique_consecutive` and two `.item()` reads,
        three device-to-host syncs a step, as vLLM's runners mark every mapping a
        prefill): the ops here take a slot a row."""
        slot_of = {lora_id: i for i, lora_id in enumerate(lora_index_to_id) if lora_id is not None}
        tokens = np.array([slot_of[i] if i > 0 else -1 for i in mapping.index_mapping], np.int64)
        rows = np.array([slot_of[i] if i > 0 else -1 for i in mapping.prompt_mapping], np.int64)
        # vLLM's sampler_indices_padded: row r of slot s (no adapter: max_loras - 1) at
        # r + s * rows; embeddings_indices: a token's slot (0 without one) * vocab_size.
        padded = np.arange(len(rows)) + np.where(rows < 0, max_loras - 1, rows) * len(rows)
        staged = torch.from_numpy(
            np.concatenate([tokens, rows, padded, np.maximum(tokens, 0) * vocab_size])
        )
        device = torch.device(self.device)
        if device.type != "cpu" and PIN_MEMORY:
            staged = staged.pin_memory()
        sent = staged.to(device, non_blocking=True)
        lengths = [len(tokens), len(rows), len(rows), len(tokens)]
        buffers = (
            self._token_lora_indices, self._sampler_indices,
            self._sampler_indices_padded, self._embeddings_indices,
        )  # fmt: skip
        for buffer, part in zip(buffers, sent.split(lengths), strict=True):
            buffer[: part.shape[0]].copy_(part)
        self.indices_len[:] = lengths
        self.is_prefill = mapping.is_prefill

    def add_shrink(
        self,
        y: tuple[torch.Tensor, ...] | torch.Tensor,
        x: torch.Tensor,
        lora_a_stacked: tuple[torch.Tensor, ...],
        scale: float,
        **kwargs: Any,
    ) -> None:
        x = x.view(-1, x.shape[-1])
        slots = self._token_lora_indices[: x.shape[0]]
        for out, lora_a in zip(y, lora_a_stacked, strict=True):
            self.lora_ops.shrink(out.view(-1, out.shape[-1]), x, lora_a, slots, scale)

    def add_expand(
        self,
        y: torch.Tensor,
        x: tuple[torch.Tensor, ...] | torch.Tensor,
        lora_b_stacked: tuple[torch.Tensor, ...],
        output_slices: tuple[int, ...],
        offset_start: int = 0,
        add_inputs: bool = True,
        **kwargs: Any,
    ) -> None:
        out = y.view(-1, y.shape[-1])
        slots = self._token_lora_indices[: out.shape[0]]
        offset = offset_start
        for part, lora_b, width in zip(x, lora_b_stacked, output_slices, strict=True):
            self.lora_ops.expand(out, part, lora_b, slots, offset, add_inputs)
            offset += width

    def add_lora_embedding(
        self,
        y: torch.Tensor,
        x: torch.Tensor,
        lora_b_stacked: torch.Tensor,
        add_inputs: bool = True,
        **kwargs: Any,
    ) -> None:
        out = y.view(-1, y.shape[-1])
        slots = self._token_lora_indices[: out.shape[0]]
        self.lora_ops.expand(out, x, lora_b_stacked, slots, 0, add_inputs)

    def add_lora_linear(
        self,
        y: torch.Tensor,
        x: torch.Tensor,
        lora_a_stacked: tuple[torch.Tensor, ...],
        lora_b_stacked: tuple[torch.Tensor, ...],
        scale: float,
        output_slices: tuple[int, ...],
        *,
        buffer: tuple[torch.Tensor, ...] | None = None,
        **kwargs: Any,
    ) -> None:
        if buffer is None:
            rank = lora_b_stacked[0].size(-1)
            rows = x.view(-1, x.shape[-1]).shape[0]
            # float32, as vLLM's own kernels keep the rank-sized intermediate
            buffer = tuple(
                torch.zeros((rows, rank), dtype=torch.float32, device=x.device)
                for _ in output_slices
            )
        self.add_shrink(buffer, x, lora_a_stacked, scale)
        self.add_expand(y, buffer, lora_b_stacked, output_slices, add_inputs=True)

    def add_lora_logits(
        self,
        y: torch.Tensor,
        x: torch.Tensor,
        lora_a_stacked: torch.Tensor,
        lora_b_stacked: torch.Tensor,
        scale: float,
        *,
        buffer: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> None:
        out = y.view(-1, y.shape[-1])
        x = x.view(-1, x.shape[-1])
        slots = self._sampler_indices[: x.shape[0]]
        if buffer is None:
            rank = lora_b_stacked.size(-1)
            buffer = torch.zeros((x.shape[0], rank), dtype=torch.float32, device=x.device)
        self.lora_ops.shrink(buffer, x, lora_a_stacked, slots, scale)
        self.lora_ops.expand(out, buffer, lora_b_stacked, slots, 0, True)

    def apply_lora_full_linear(
        self,
        y: torch.Tensor,
        x: torch.Tensor,
        weight_stacked: torch.Tensor,
        bias_stacked: torch.Tensor,
        module_enabled: torch.Tensor,
    ) -> None:
        rows = x.shape[0]
        width = weight_stacked.size(-2)
        adapter_y = torch.zeros((rows, width), dtype=torch.float32, device=x.device)
        self.lora_ops.shrink(adapter_y, x, weight_stacked, self._sampler_indices[:rows], 1.0)
        y.copy_(self._select_full_linear_output(y, adapter_y, bias_stacked, module_enabled))
