"""The LoRA port on the NPU: the torch ops of adapters/lora_torch.py on the device's tensors.

The 2.14.0 wheel's op table (schemas/torch_npu_2.14.0.json) has no multi-adapter
BGMV/SGMV op; vllm-ascend compiles its own. npu_grouped_matmul over rows sorted by adapter
would avoid the L-fold work of computing every slot; not done (the sort's group sizes are
data).
"""

from __future__ import annotations

from adapters.lora_torch import TorchLoraOps


class NpuLoraOps(TorchLoraOps):
    """Plain torch on `npu` tensors: no torch_npu op serves it."""
