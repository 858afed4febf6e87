"""The linear-attention port on the host: the torch ops of adapters/gdn_torch.py."""

from __future__ import annotations

from adapters.gdn_torch import TorchLinearAttentionOps


class CpuLinearAttentionOps(TorchLinearAttentionOps):
    """Plain torch on host tensors (no native kernel of its own)."""
