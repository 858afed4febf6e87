"""The locally made MoE/MLA models load in transformers, route tokens apart and generate."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest
import torch

from support import hf_reference as hf

ARCHITECTURES = {
    "deepseek_v3": "DeepseekV3ForCausalLM",
    "deepseek_v2": "DeepseekV2ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
}
PROMPTS = ["def main():", "import os\nimport sys", "The quick brown fox"]


@pytest.fixture(scope="module", params=list(ARCHITECTURES))
def tiny(request: pytest.FixtureRequest) -> tuple[str, Path]:
    return request.param, hf.local_model(request.param, "tiny")


def test_config_has_the_style_features(tiny: tuple[str, Path]) -> None:
    style, path = tiny
    config = json.loads((path / "config.json").read_text())
    assert config["architectures"] == [ARCHITECTURES[style]]
    if style == "deepseek_v3":
        assert config["q_lora_rank"] and config["n_group"] > config["topk_group"] > 1
        assert config["routed_scaling_factor"] != 1.0 and config["first_k_dense_replace"] == 1
        model, _ = hf.load(path)
        bias = next(b for n, b in model.named_buffers() if n.endswith("e_score_correction_bias"))
        assert float(bias.abs().max()) > 0.05  # selection differs from the weights
    if style == "deepseek_v2":
        assert config["q_lora_rank"] is None and config["topk_method"] == "greedy"
    if style.startswith("deepseek"):
        assert config["kv_lora_rank"] and config["qk_rope_head_dim"]


def _expert_choices(path: Path) -> collections.Counter[int]:
    """How often each expert of the first MoE layer is among a token's top-k."""
    model, _ = hf.load(path)
    layer = model.model.layers[1].mlp
    chosen: collections.Counter[int] = collections.Counter()

    def record(_module: object, _inp: object, out: tuple[torch.Tensor, ...]) -> None:
        chosen.update(out[-1].flatten().tolist())  # (logits, weights, indices)

    handle = layer.gate.register_forward_hook(record)
    try:
        with torch.no_grad():
            model(torch.tensor([list(range(3, 131))]))
    finally:
        handle.remove()
    return chosen


def test_routing_is_not_flat(tiny: tuple[str, Path]) -> None:
    _, path = tiny
    chosen = _expert_choices(path)
    experts = hf.load(path)[0].model.layers[1].mlp.experts.num_experts
    assert len(chosen) >= experts // 2, f"few experts used: {chosen}"
    assert max(chosen.values()) < 0.5 * sum(chosen.values())


def test_greedy_depends_on_the_prompt_and_moves_on(tiny: tuple[str, Path]) -> None:
    _, path = tiny
    outs = hf.greedy_token_ids(path, PROMPTS, 12)
    assert len({tuple(ids) for ids in outs}) == len(PROMPTS)
    for ids in outs:
        assert len(ids) == 12 and len(set(ids)) >= 4, ids
