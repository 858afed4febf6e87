"""DeepSeek-V4 checkpoint names: the routed experts' tensors go to their layer's stacked
w13 / w2 (the MoE port's form), everything else by name."""

from __future__ import annotations

import pytest

from adapters.vllm.models.deepseek_v4.weight_names import checkpoint_name, expert_weight


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("layers.3.ffn.experts.17.w1.weight", ("model.layers.3.ffn", 17, "w1")),
        ("model.layers.0.ffn.experts.0.w3.weight", ("model.layers.0.ffn", 0, "w3")),
        ("model.layers.2.ffn.experts.7.w2.weight", ("model.layers.2.ffn", 7, "w2")),
        ("model.layers.2.ffn.shared_experts.w1.weight", None),
        ("model.layers.2.ffn.gate.weight", None),
        ("model.layers.1.attn.wkv.weight", None),
    ],
)
def test_routed_expert_tensors_are_told_apart(raw: str, want: object) -> None:
    name = checkpoint_name(raw)
    assert name is not None
    assert expert_weight(name) == want
