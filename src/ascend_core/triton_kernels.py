"""Whether the NPU launches the Triton kernels of kernels/triton, decided once from the
operator's request (VLLM_ASCEND_TRITON_KERNELS) and what the host's Triton is."""

from __future__ import annotations

import enum

from attrs import frozen


class TritonKernelsRequest(enum.Enum):
    """The values VLLM_ASCEND_TRITON_KERNELS accepts."""

    AUTO = "auto"
    OFF = "off"
    INTERPRET = "interpret"


class KernelPath(enum.Enum):
    """How the NPU's slot mapping, top-k/top-p and rejection sampler run."""

    TORCH = "torch"  # chains of torch ops on the device: the fallback and the reference
    TRITON = "triton"  # kernels/triton compiled by triton-ascend for the NPU
    INTERPRETED = "interpreted"  # kernels/triton in Triton's interpreter (tests only)


@frozen
class TritonFacts:
    """What the adapter saw: whether `triton` imports, whether it has triton-ascend's
    backend, whether the plugin's `kernels` package imports, and any import error."""

    triton_imports: bool
    ascend_backend: bool
    kernels_import: bool
    error: str = ""


@frozen
class KernelPathDecision:
    path: KernelPath
    reason: str

    def describe(self) -> str:
        return f"{self.path.value} ({self.reason})"


def decide_kernel_path(request: TritonKernelsRequest, facts: TritonFacts) -> KernelPathDecision:
    """The path the NPU adapter takes; `auto` falls back to torch with the reason."""
    if request is TritonKernelsRequest.OFF:
        return KernelPathDecision(KernelPath.TORCH, "VLLM_ASCEND_TRITON_KERNELS=off")
    missing = _missing(facts, need_ascend=request is TritonKernelsRequest.AUTO)
    if request is TritonKernelsRequest.INTERPRET:
        if missing:
            return KernelPathDecision(
                KernelPath.TORCH,
                f"VLLM_ASCEND_TRITON_KERNELS=interpret, but {missing}; torch path",
            )
        return KernelPathDecision(
            KernelPath.INTERPRETED,
            "VLLM_ASCEND_TRITON_KERNELS=interpret: Triton's interpreter over host copies "
            "of the device tensors (a test mode, not for serving)",
        )
    if missing:
        return KernelPathDecision(KernelPath.TORCH, f"{missing}; torch path")
    return KernelPathDecision(KernelPath.TRITON, "triton-ascend imports with its Ascend backend")


def _missing(facts: TritonFacts, need_ascend: bool) -> str:
    detail = f" ({facts.error})" if facts.error else ""
    if not facts.triton_imports:
        return f"triton does not import{detail}"
    if need_ascend and not facts.ascend_backend:
        return "triton has no Ascend backend (stock Triton, not triton-ascend)"
    if not facts.kernels_import:
        return f"the plugin's kernels package does not import{detail}"
    return ""
