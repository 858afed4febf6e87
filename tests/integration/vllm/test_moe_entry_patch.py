"""The host's MoE entry patch: vLLM's direct `_moe_forward` for a layer whose method
traces, the opaque op otherwise, decided at each call (the method decides at load)."""

from __future__ import annotations

from types import SimpleNamespace

from vllm.model_executor.layers.fused_moe.runner import moe_runner

from adapters.vllm.patches import moe_entry
from ascend_core.patches import REGISTRY

SPEC = next(s for s in REGISTRY if s.id == "host-moe-direct-entry")


def test_the_entry_follows_the_methods_word() -> None:
    calls: list[str] = []
    method = SimpleNamespace(traced_in_graph=False)
    runner = SimpleNamespace(routed_experts=SimpleNamespace(quant_method=method))
    entry = moe_entry._entry(
        runner, lambda *a: calls.append("opaque") or a, lambda *a: calls.append("direct") or a
    )
    assert entry(1, 2) == (1, 2)
    method.traced_in_graph = True  # set at load, after the runner picked its entry
    assert entry(3) == (3,)
    assert calls == ["opaque", "direct"]


def test_the_patch_wraps_select_forward_once_and_keeps_a_direct_choice() -> None:
    saved = moe_runner.MoERunner._select_forward  # patched already if the plugin loaded
    original = getattr(saved, "__wrapped__", saved)
    try:
        moe_runner.MoERunner._select_forward = original
        moe_entry.call_traced_moe_directly(SPEC)
        patched = moe_runner.MoERunner._select_forward
        assert patched is not original and patched.__wrapped__ is original  # type: ignore[attr-defined]
        moe_entry.call_traced_moe_directly(SPEC)  # re-entrant: not wrapped twice
        assert moe_runner.MoERunner._select_forward is patched
        # A runner for which vLLM itself picks the direct function keeps it as it is.
        moe_runner.MoERunner._select_forward = lambda self: moe_runner._moe_forward
        moe_entry.call_traced_moe_directly(SPEC)
        stub = SimpleNamespace(_shared_experts=None)
        assert moe_runner.MoERunner._select_forward(stub) is moe_runner._moe_forward
    finally:
        moe_runner.MoERunner._select_forward = saved
