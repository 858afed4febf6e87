"""A draft model's input bookkeeping on the host: the plain-torch reference
(adapters/draft_inputs.py)."""

from __future__ import annotations

from adapters.draft_inputs import TorchDraftInputOps


class CpuDraftInputOps(TorchDraftInputOps):
    """vLLM's EAGLE input kernels are Triton with no host build; these torch ops stand in."""
