"""Qwen3-Next and Qwen3.5-MoE on the emulated NPU, bf16: the same greedy ids as the host
device.

Two fresh processes side by side (qwen3_next_run.py): the host, and the NPU platform,
worker and adapters on the emulated torch_npu and device. A batch of 8 mixed lengths
with chunked prefill: the GDN layers' prefills go through npu_chunk_gated_delta_rule,
their decodes through npu_recurrent_gated_delta_rule, the full-attention layer through
npu_fused_infer_attention_score reading the hybrid layout's interleaved K/V pages. The NPU
runs in the plan's graph mode (FULL_AND_PIECEWISE, the dense default): each uniform decode
step one graph with the GDN layers' convolution and recurrent state updates inside (their
state slots in vLLM's persistent GDN metadata, nothing read back), other steps in pieces
between the attention and GDN layers. An emulator, not Ascend hardware.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.child_runs import host_and_npu
from support.hf_reference import MODELS_DIR, make_models_module

RUNNER = Path(__file__).with_name("qwen3_next_run.py")


def _model(style: str) -> str:
    models = make_models_module()
    if style == "qwen3_next":
        return str(models.make_qwen3_next(MODELS_DIR / "tiny-qwen3_next"))
    return str(models.make_qwen3_5(MODELS_DIR / f"tiny-{style}", style=style))


# Qwen3.5-MoE: the GDN's input projections stored apart (vLLM stacks them at load), the rest
# as Qwen3-Next; its dense sibling shares every NPU op with it and runs on the host only.
@pytest.fixture(scope="module", params=["qwen3_next", "qwen3_5_moe"])
def runs(request: pytest.FixtureRequest) -> dict[str, dict[str, Any]]:
    return host_and_npu(RUNNER, _model(request.param))


def test_npu_gives_the_host_ids_through_the_gdn_ops(runs) -> None:  # type: ignore[no-untyped-def]
    host, npu = runs["host"], runs["npu"]
    assert npu["ids"] == host["ids"]
    assert npu["kv_devices"] == ["npu"] and host["kv_devices"] == ["cpu"]
    assert {"npu_chunk_gated_delta_rule", "npu_recurrent_gated_delta_rule",
            "npu_fused_infer_attention_score"} <= set(npu["torch_npu_ops"])
    # The plan's graphs: a full graph and the pieces at each of the 4 sizes, decode steps
    # replayed whole; no value read back inside a capture (the emulator refuses one).
    assert npu["graph_mode"] == "FULL_AND_PIECEWISE" and npu["captured"] > 4
    counters = npu["counters"]
    assert counters["graph_replays"] > 0 and counters["graph_replayed_ops"] > 0
    assert counters["scalar_reads"] == 0
    # vLLM raised the hybrid block from the plan's 128 to hold a GDN state page.
    assert npu["block_size"] == host["block_size"] and npu["block_size"] % 128 == 0
