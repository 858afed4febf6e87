"""The NPU's Triton kernels (kernels/triton) behind the slot-mapping, sampling and
rejection ports, chosen once per process; the torch adapters stay as fallback and reference.

`choose_triton_kernels` looks at the host's Triton, lets the core decide
(`ascend_core.triton_kernels.decide_kernel_path`), loads the kernel modules and logs the
choice. The `with_triton_*` factories the container calls return the torch adapter
itself on the torch path, or a wrapper that launches the kernels and hands the cases they
do not take (other dtypes, float64 draws) to the torch adapter.
"""

from __future__ import annotations

import collections
import importlib
import logging
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ascend_core.triton_kernels import (
    KernelPath,
    KernelPathDecision,
    TritonFacts,
    TritonKernelsRequest,
    decide_kernel_path,
)
from ports.rejection import Drafts, RejectionOps
from ports.sampling import SamplingOps
from ports.slot_mapping import SlotMapping

if TYPE_CHECKING:
    import torch

    from ascend_core.env_registry import EnvSettings
    from ports.environment import Environment

logger = logging.getLogger("vllm.plugins.ascend")

# The kernel modules this adapter launches, by role.
MODULES = {
    "slot_mapping": "kernels.triton.slot_mapping",
    "topk_topp": "kernels.triton.topk_topp",
    "rejection": "kernels.triton.rejection",
}


class TritonKernels:
    """The decision and, off the torch path, the loaded kernel modules by role; counts
    each kernel launch by name (for the benchmark's launches per step)."""

    def __init__(self, decision: KernelPathDecision, modules: dict[str, ModuleType]) -> None:
        self.decision = decision
        self.modules = modules
        self.launches: collections.Counter[str] = collections.Counter()

    @property
    def enabled(self) -> bool:
        return self.decision.path is not KernelPath.TORCH

    def module(self, role: str) -> ModuleType:
        self.launches[role] += 1
        return self.modules[role]


def _ascend_backend() -> bool:
    from triton.backends import backends

    return "ascend" in backends


def _load(interpreted: bool) -> dict[str, ModuleType]:
    if interpreted:
        from kernels.triton import load_interpreted

        return {role: load_interpreted(name) for role, name in MODULES.items()}
    return {role: importlib.import_module(name) for role, name in MODULES.items()}


def choose_triton_kernels(request: TritonKernelsRequest) -> TritonKernels:
    """Look at Triton once, decide, load the kernels and log the choice."""
    decision = kernel_path(request)
    modules: dict[str, ModuleType] = {}
    if decision.path is not KernelPath.TORCH:
        try:
            modules = _load(decision.path is KernelPath.INTERPRETED)
        except Exception as error:  # a kernel module that fails to load: keep serving
            decision = KernelPathDecision(
                KernelPath.TORCH, f"loading kernels/triton failed ({error!r}); torch path"
            )
    logger.info(
        "NPU kernels for slot mapping, top-k/top-p and rejection sampling: %s",
        decision.describe(),
    )
    return TritonKernels(decision, modules)


def kernel_path(request: TritonKernelsRequest) -> KernelPathDecision:
    """The decision alone (no kernel module loaded): for the doctor and for the adapter."""
    if request is TritonKernelsRequest.OFF:
        return decide_kernel_path(request, TritonFacts(False, False, False))
    try:
        importlib.import_module("triton")
    except Exception as error:
        return decide_kernel_path(request, TritonFacts(False, False, False, repr(error)))
    ascend = _ascend_backend()
    try:
        importlib.import_module("kernels.triton")
    except Exception as error:
        return decide_kernel_path(request, TritonFacts(True, ascend, False, repr(error)))
    return decide_kernel_path(request, TritonFacts(True, ascend, True))


def triton_kernels_from(settings: EnvSettings) -> TritonKernels:
    return choose_triton_kernels(settings.triton_kernels)


def describe_kernel_path(env: Environment) -> str:
    """For the doctor: the path the NPU adapter would take here, and why (no kernel
    module loaded, no torch imported); a bad value is the registry check's to report."""
    from ascend_core.env_registry import TRITON_KERNELS

    raw = env.get(TRITON_KERNELS.name)
    try:
        request = TRITON_KERNELS.default if raw is None else TRITON_KERNELS.parse(raw)
    except ValueError:
        return f"{TRITON_KERNELS.name}={raw!r} is not {TRITON_KERNELS.accepted}"
    return kernel_path(request).describe()


# --- The ports, on the kernels --------------------------------------------------------


class TritonSlotMapping(SlotMapping):
    """kernels/triton/slot_mapping.py: one launch a step."""

    def __init__(self, kernels: TritonKernels, fallback: SlotMapping) -> None:
        self._kernels = kernels
        self._fallback = fallback

    def compute(
        self,
        num_tokens: int,
        max_num_tokens: int,
        query_start_loc: torch.Tensor,
        positions: torch.Tensor,
        block_table: torch.Tensor,
        block_table_stride: int,
        slot_mapping: torch.Tensor,
        block_size: int,
        pad_id: int,
    ) -> None:
        num_reqs = query_start_loc.shape[0] - 1
        self._kernels.module("slot_mapping").compute_slot_mapping(
            num_reqs,
            num_tokens if num_reqs > 0 else 0,
            max_num_tokens,
            query_start_loc,
            positions,
            block_table,
            slot_mapping,
            block_size,
            pad_id=pad_id,
            block_table_stride=block_table_stride,
        )


class TritonSamplingOps(SamplingOps):
    """Greedy stays the torch adapter's argmax; top-k/top-p masks float32 logits with
    kernels/triton/topk_topp.py (one launch, no sort)."""

    def __init__(self, kernels: TritonKernels, fallback: SamplingOps) -> None:
        self._kernels = kernels
        self._fallback = fallback

    def greedy(self, logits: torch.Tensor) -> torch.Tensor:
        return self._fallback.greedy(logits)

    def top_k_top_p(
        self, logits: torch.Tensor, k: torch.Tensor | None, p: torch.Tensor | None
    ) -> torch.Tensor | None:
        import torch

        if logits.dtype != torch.float32 or logits.dim() != 2 or logits.stride(1) != 1:
            return self._fallback.top_k_top_p(logits, k, p)
        if k is None and p is None:
            return logits
        topk_topp = self._kernels.module("topk_topp")
        masked: torch.Tensor = topk_topp.apply_top_k_top_p(logits, k, _f32(p))
        return masked

    def exponential_noise(self, keys: torch.Tensor, vocab: int) -> torch.Tensor:
        return self._fallback.exponential_noise(keys, vocab)


class TritonRejectionOps(RejectionOps):
    """kernels/triton/rejection.py: one launch per method; float32 probabilities only
    (Ascend's vector units have no fp64: float64 scores stay on the torch adapter)."""

    def __init__(self, kernels: TritonKernels, fallback: RejectionOps) -> None:
        self._kernels = kernels
        self._fallback = fallback

    def expand_to_tokens(
        self,
        values: torch.Tensor,
        cu_num_tokens: torch.Tensor,
        num_tokens: int,
        replace_from: float = 0,
        replace_to: float = 0,
    ) -> torch.Tensor:
        if values.dtype.is_floating_point and values.dtype != _float32():
            return self._fallback.expand_to_tokens(
                values, cu_num_tokens, num_tokens, replace_from, replace_to
            )
        out = values.new_empty(num_tokens)
        self._kernels.module("rejection").expand_to_tokens(
            out, values, cu_num_tokens, replace_from, replace_to
        )
        return out

    def verify_greedy(
        self,
        out: torch.Tensor,
        drafts: Drafts,
        target_argmax: torch.Tensor,
        bonus_token_ids: torch.Tensor,
        is_greedy: torch.Tensor | None,
    ) -> None:
        self._kernels.module("rejection").verify_greedy(
            out,
            drafts.token_ids,
            drafts.cu_num_drafts,
            drafts.max_len,
            target_argmax,
            bonus_token_ids,
            is_greedy,
        )

    def recover(
        self,
        drafts: Drafts,
        draft_probs: torch.Tensor | None,
        target_probs: torch.Tensor,
        inv_q: torch.Tensor,
    ) -> torch.Tensor:
        if not _all_f32(draft_probs, target_probs, inv_q):
            return self._fallback.recover(drafts, draft_probs, target_probs, inv_q)
        recovered = drafts.token_ids.new_empty(drafts.token_ids.shape)
        self._kernels.module("rejection").recover(
            recovered,
            drafts.token_ids,
            drafts.cu_num_drafts,
            drafts.max_len,
            draft_probs,
            target_probs,
            inv_q,
        )
        return recovered

    def verify_random(
        self,
        out: torch.Tensor,
        drafts: Drafts,
        draft_probs: torch.Tensor | None,
        target_probs: torch.Tensor,
        bonus_token_ids: torch.Tensor,
        recovered_token_ids: torch.Tensor,
        uniform: torch.Tensor,
        is_greedy: torch.Tensor,
    ) -> None:
        if not _all_f32(draft_probs, target_probs):
            self._fallback.verify_random(
                out,
                drafts,
                draft_probs,
                target_probs,
                bonus_token_ids,
                recovered_token_ids,
                uniform,
                is_greedy,
            )
            return
        self._kernels.module("rejection").verify_random(
            out,
            drafts.token_ids,
            drafts.cu_num_drafts,
            drafts.max_len,
            draft_probs,
            target_probs,
            bonus_token_ids,
            recovered_token_ids,
            _f32(uniform),  # vLLM draws float64; the kernel compares in float32
            is_greedy,
        )


def _float32() -> Any:
    import torch

    return torch.float32


def _f32(tensor: torch.Tensor | None) -> torch.Tensor | None:
    if tensor is None or tensor.dtype == _float32():
        return tensor
    return tensor.to(_float32())


def _all_f32(*tensors: torch.Tensor | None) -> bool:
    return all(t is None or t.dtype == _float32() for t in tensors)


# --- The container's factories: the torch adapter itself on the torch path ------------


def with_triton_slot_mapping(kernels: TritonKernels, torch_path: SlotMapping) -> SlotMapping:
    return TritonSlotMapping(kernels, torch_path) if kernels.enabled else torch_path


def with_triton_sampling(kernels: TritonKernels, torch_path: SamplingOps) -> SamplingOps:
    return TritonSamplingOps(kernels, torch_path) if kernels.enabled else torch_path


def with_triton_rejection(kernels: TritonKernels, torch_path: RejectionOps) -> RejectionOps:
    return TritonRejectionOps(kernels, torch_path) if kernels.enabled else torch_path
