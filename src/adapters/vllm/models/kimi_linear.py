"""Kimi-Linear (KimiLinearForCausalLM) as the plugin serves it.

vLLM 0.33 picks the class by platform (vllm/models/kimi_k3/__init__.py) and an out-of-tree
platform gets the NVIDIA one, whose KDA and MLA paths are CUDA kernels (fused-gate KDA, the
CUTLASS GEMM + all-reduce, FlashMLA). The class here is vLLM's reference path, the one vLLM
gives XPU (kimi_k3/amd/linear.py): its KDA layers are vLLM's shared
KimiGatedDeltaNetAttention (ours through the kda-layer patch: the linear-attention port), its
NoPE MLA layers vLLM's MLA wrapper over the plugin's MLA backend (AITER fusions off where
AITER is absent), its MoE layers FusedMoE on the plugin's MoE method.
"""

from __future__ import annotations

from vllm.models.kimi_k3.amd.linear import KimiLinearForCausalLM


class AscendKimiLinearForCausalLM(KimiLinearForCausalLM):
    """vLLM's reference Kimi-Linear class, registered for the architecture on our platform."""
