"""Plan step: prefix caching of hybrid models is turned off, with vLLM's align mode."""

from __future__ import annotations

import pytest

from ascend_core.plan import fields, plan_config
from unit.core.plan_fixtures import dense_model, host, npu


def _qwen3_next(**overrides: object):  # type: ignore[no-untyped-def]
    return dense_model(architecture="Qwen3NextForCausalLM", hybrid=True, max_model_len=4096,
                       **overrides)


@pytest.mark.parametrize("where", [host, npu])
def test_hybrid_models_serve_without_prefix_caching_and_say_why(where) -> None:  # type: ignore[no-untyped-def]
    plan = plan_config(where(_qwen3_next()))
    (caching,) = plan.changes_to(fields.PREFIX_CACHING)
    assert (caching.old, caching.new) == (True, False)
    assert "batch_memcpy_kernel" in caching.reason
    (mode,) = plan.changes_to(fields.MAMBA_CACHE_MODE)
    assert (mode.old, mode.new) == ("align", "none")
    (size,) = plan.changes_to(fields.MAMBA_BLOCK_SIZE)
    assert size.new == 4096


def test_nothing_changes_without_prefix_caching_or_for_other_models() -> None:
    off = plan_config(host(_qwen3_next(), cache={"enable_prefix_caching": False}))
    dense = plan_config(host(dense_model()))
    for plan in (off, dense):
        assert not plan.changes_to(fields.PREFIX_CACHING)
        assert not plan.changes_to(fields.MAMBA_CACHE_MODE)
