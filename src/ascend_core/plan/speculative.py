"""Step: speculative decoding's limits, checked before any weight loads."""

from __future__ import annotations

from ascend_core.deployment import Deployment
from ascend_core.errors import ConfigError
from ascend_core.plan.result import Draft

# The NPU's fused attention op (npu_fused_infer_attention_score) takes at most 16 query
# tokens per request in a decode step, and a speculative step verifies 1 + k of them (the
# reference plugin's limit). The host keeps the same limit, so that a deployment planned
# on the host moves to the NPU unchanged.
MAX_QUERY_TOKENS_PER_DECODE = 16


def check_speculative(deployment: Deployment, draft: Draft) -> Draft:
    """k at least 1, and 1 + k query tokens per decoding request within the op's limit.

    Which methods each device serves is the support matrix's (check_support)."""
    spec = deployment.speculative
    if not spec.method:
        return draft
    k = spec.num_speculative_tokens
    if k < 1:
        draft = draft.fail(
            ConfigError(
                f"speculative_config method {spec.method!r} with num_speculative_tokens={k}: "
                "speculative decoding proposes at least one token per step.",
                "set num_speculative_tokens to 1 or more, or drop speculative_config",
            )
        )
    elif k + 1 > MAX_QUERY_TOKENS_PER_DECODE:
        draft = draft.fail(
            ConfigError(
                f"speculative_config num_speculative_tokens={k}: a decode step would verify "
                f"{k + 1} query tokens per request, more than the "
                f"{MAX_QUERY_TOKENS_PER_DECODE} the NPU's fused attention op takes "
                "(num_speculative_tokens + 1 <= 16).",
                f"set num_speculative_tokens to at most {MAX_QUERY_TOKENS_PER_DECODE - 1}",
            )
        )
    return draft
