"""The rejection sampler on the host: the plain-torch reference (adapters/draft_verification.py)."""

from __future__ import annotations

from adapters.draft_verification import TorchRejectionOps


class CpuRejectionOps(TorchRejectionOps):
    """vLLM's Triton rejection kernels have no host build; these torch ops stand in."""
