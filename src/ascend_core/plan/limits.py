"""Steps: the support matrix's refusals (run first) and the NPU ops' documented limits."""

from __future__ import annotations

from ascend_core.deployment import Deployment
from ascend_core.op_limits import (
    attention_limit_errors,
    encoder_attention_limit_errors,
    mla_limit_errors,
    sparse_mla_limit_errors,
)
from ascend_core.plan.result import Draft
from ascend_core.support import refusals
from ascend_core.support.compressed_mla import compressed_mla_limit_errors


def check_support(deployment: Deployment, draft: Draft) -> Draft:
    """Refuse, before any weight loads, every feature the serving device lacks (and what
    the host's DeepSeek-V4 class does not serve)."""
    for error in (*refusals(deployment), *compressed_mla_limit_errors(deployment)):
        draft = draft.fail(error)
    return draft


def check_op_limits(deployment: Deployment, draft: Draft) -> Draft:
    """What the NPU attention op documents it refuses, for MHA/GQA (the block size:
    decide_block_size), for MLA (its shapes, block size included) and for a vision
    tower's encoder attention."""
    for error in (*attention_limit_errors(deployment), *mla_limit_errors(deployment),
                  *sparse_mla_limit_errors(deployment),
                  *encoder_attention_limit_errors(deployment)):
        draft = draft.fail(error)
    return draft
