"""The LoRA port on the host: the torch ops of adapters/lora_torch.py."""

from __future__ import annotations

from adapters.lora_torch import TorchLoraOps


class CpuLoraOps(TorchLoraOps):
    """Plain torch on host tensors (no native kernel of its own)."""
