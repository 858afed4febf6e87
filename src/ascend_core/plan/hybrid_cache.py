"""Step: prefix caching of hybrid models (mamba / gated-delta-net state), off on both devices.

vLLM 0.33 caches prefixes of hybrid models in its "align" mamba cache mode: the state is
kept per block, and at each new block the runner copies a request's state into the next
block's slot with `batch_memcpy_kernel`, a Triton kernel over raw device pointers
(vllm/v1/worker/mamba_utils.py) that neither the host nor the NPU path implements (on the
host it is a placeholder that raises at the first copy). So the plan turns prefix caching
off for these models, and with it vLLM's align mode (its model hook has chosen that mode
before the platform is asked) and the mamba block size align mode set, back to what vLLM
sets without prefix caching (one state per request: max_model_len).
"""

from __future__ import annotations

from ascend_core.deployment import Deployment
from ascend_core.plan import fields
from ascend_core.plan.result import Draft

REASON = (
    "vLLM's prefix caching of hybrid (mamba/linear-attention) models copies the layers' "
    "states between blocks with a Triton kernel over raw device pointers "
    "(vllm/v1/worker/mamba_utils.py batch_memcpy_kernel) that this build does not "
    "implement on the host or the NPU"
)


def decide_hybrid_prefix_caching(deployment: Deployment, draft: Draft) -> Draft:
    if not (deployment.model.hybrid and deployment.cache.enable_prefix_caching):
        return draft
    return (
        draft.change(fields.PREFIX_CACHING, True, False, REASON)
        .change(
            fields.MAMBA_CACHE_MODE, "align", "none",
            "no prefix caching: one state per request, as vLLM keeps it without",
        )
        .change(
            fields.MAMBA_BLOCK_SIZE,
            None,  # vLLM's hook set the (then unset) block size
            deployment.model.max_model_len,
            "no prefix caching: vLLM's mamba block size without it (max_model_len)",
        )
    )
