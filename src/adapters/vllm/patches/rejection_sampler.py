"""vLLM's rejection sampler on our devices: its verification on the RejectionOps port.

`RejectionSampler.forward` calls `rejection_sample` (greedy and random verification,
recovered tokens), looked up as a module global at each call, so rebinding it there is
enough. (Its other kernel, the expand of per-request temperature/top-k/top-p to per-draft,
goes through vLLM's kernel-override registry instead: torch_kernels.py.) The random
draws stay vLLM's own (`generate_uniform_probs`, one exponential row per request, each
seeded request on its generator), so a seeded request repeats as it does on a GPU.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from adapters.vllm.patches._symbols import rebind, resolve
from ascend_core.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from ascend_core.patches import PatchSpec
    from ports.rejection import RejectionOps


def _exponential_inv_q(
    num_drafts: list[int],
    generators: dict[int, torch.Generator],
    shape: tuple[int, int],
    device: torch.device,
    use_fp64: bool,
) -> torch.Tensor:
    """1/q, q ~ Exp(1) [B, V], drawn as vLLM's sample_recovered_tokens draws it."""
    import torch

    q = torch.empty(shape, dtype=torch.float64 if use_fp64 else torch.float32, device=device)
    q.exponential_()
    for i, generator in generators.items():
        if num_drafts[i] > 0:  # as vLLM: no draw for a request without drafts
            q[i].exponential_(generator=generator)
    return q.reciprocal()


def rejection_sample(
    ops: RejectionOps,
    draft_token_ids: torch.Tensor,
    num_draft_tokens: list[int],
    max_spec_len: int,
    cu_num_draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_logits: torch.Tensor,
    bonus_token_ids: torch.Tensor,
    sampling_metadata: Any,
    synthetic_mode: bool = False,
    synthetic_conditional_rates: torch.Tensor | None = None,
    use_fp64_gumbel: bool = False,
    fly_window_size: int | None = None,
    fly_entropy_threshold: float | None = None,
    fly_entropy_top_k: int = 3,
) -> torch.Tensor:
    """vllm.v1.sample.rejection_sampler.rejection_sample (0.33) on the port's `ops`."""
    import torch
    from vllm.v1.sample import rejection_sampler as upstream

    from ports.rejection import Drafts

    if synthetic_mode or fly_window_size is not None:
        raise ConfigError(
            "This plugin's rejection sampler has no synthetic acceptance or FLy mode "
            f"(synthetic_mode={synthetic_mode}, fly_window_size={fly_window_size}).",
            "remove the synthetic acceptance rate and FLy settings from speculative_config",
        )
    batch = len(num_draft_tokens)
    device = target_logits.device
    out = torch.full(
        (batch, max_spec_len + 1), upstream.PLACEHOLDER_TOKEN_ID, dtype=torch.int32, device=device
    )
    drafts = Drafts(draft_token_ids, cu_num_draft_tokens, max_spec_len)
    meta = sampling_metadata
    is_greedy = None if meta.all_greedy else meta.temperature == upstream.GREEDY_TEMPERATURE
    uniform = None
    if not meta.all_greedy:  # drawn before the greedy pass, as vLLM does
        uniform = upstream.generate_uniform_probs(
            draft_token_ids.shape[0], num_draft_tokens, meta.generators, device
        )
    if not meta.all_random:
        ops.verify_greedy(out, drafts, target_logits.argmax(dim=-1), bonus_token_ids, is_greedy)
        if meta.all_greedy:
            return out
    assert uniform is not None and is_greedy is not None
    target_probs = target_logits.softmax(dim=-1, dtype=torch.float32)
    inv_q = _exponential_inv_q(
        num_draft_tokens,
        meta.generators,
        (batch, target_probs.shape[-1]),
        device,
        use_fp64_gumbel,
    )
    recovered = ops.recover(drafts, draft_probs, target_probs, inv_q)
    ops.verify_random(
        out, drafts, draft_probs, target_probs, bonus_token_ids, recovered, uniform, is_greedy
    )
    return out


def use_rejection_ops(spec: PatchSpec) -> None:
    """Rebind the spec's target (vLLM's rejection_sample) to the port's version above."""
    original = resolve(spec.target)
    if getattr(original, "__ascend_patch__", None) == spec.id:
        return
    if spec.target.rpartition(":")[2] != "rejection_sample":
        raise ConfigError(
            f"No port-backed replacement for {spec.target} (patch {spec.id}).",
            "point the patch at vllm.v1.sample.rejection_sampler:rejection_sample",
        )

    from adapters.container import container

    rejection_ops = container().rejection_ops

    @functools.wraps(rejection_sample)
    def patched(*args: Any, **kwargs: Any) -> Any:
        return rejection_sample(rejection_ops(), *args, **kwargs)

    patched.__ascend_patch__ = spec.id  # type: ignore[attr-defined]
    patched.__wrapped__ = original  # type: ignore[attr-defined]
    rebind(spec.symbols(), patched)
