"""The host model runner: vLLM's CPU adaptation of its GPU model runner, unchanged in its math.

Attention and the custom ops are ours (selected by the platform); this class only
keeps the tensor bookkeeping on the host.
"""

from __future__ import annotations

from vllm.v1.worker.cpu_model_runner import CPUModelRunner


class HostModelRunner(CPUModelRunner):
    """vLLM's CPUModelRunner (GPUModelRunner with host buffers), without vLLM's compiled ops."""
