"""DeepSeek-V4's rope tables (adapters/vllm/models/deepseek_v4/rope.rope_table): the default
rope and YaRN, each kind's frequencies and cos/sin factor equal to what transformers' V4
computes from the same config (its rope init functions, per rope kind), and any other rope
type refused with its name. V4's checkpoints scale the "compress" kind with YaRN (factor 16
over a 64K original context); the tiny model of scripts/make_models.py does too, at its
scale, and the host's ids against transformers' (tests/integration/vllm/test_dsv4_generate.py)
check the tables inside the model."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from adapters.cpu.ops import CpuOps
from adapters.vllm.models.deepseek_v4.rope import rope_table, rotate

YARN_CASES: dict[str, dict[str, Any]] = {
    # V4 Flash's own: transformers' config fills attention_factor 1.0 where it is missing.
    "v4-checkpoint": {"factor": 16.0, "original_max_position_embeddings": 65536,
                      "beta_fast": 32, "beta_slow": 1},
    "tiny-model": {"factor": 4.0, "original_max_position_embeddings": 2048,
                   "attention_factor": 1.1},
}


def _v4_config(rope: dict[str, Any]) -> Any:
    from transformers import DeepseekV4Config

    return DeepseekV4Config(head_dim=64, partial_rotary_factor=0.25,
                            max_position_embeddings=8192,
                            rope_parameters={"rope_type": "yarn", **rope})


@pytest.mark.parametrize("name", sorted(YARN_CASES))
def test_yarn_tables_are_transformers(name: str) -> None:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = _v4_config(YARN_CASES[name])
    freqs, scale = rope_table(config, "compress")
    hf_freqs, hf_scale = ROPE_INIT_FUNCTIONS["yarn"](config, None, layer_type="compress")
    torch.testing.assert_close(freqs, hf_freqs, atol=0, rtol=0)
    assert scale == pytest.approx(hf_scale)
    plain, one = rope_table(config, "main")  # sliding layers: the default rope, unscaled
    hf_plain, hf_one = ROPE_INIT_FUNCTIONS["default"](config, None, layer_type="main") if (
        "default" in ROPE_INIT_FUNCTIONS) else (plain, 1.0)
    torch.testing.assert_close(plain, hf_plain, atol=0, rtol=0)
    assert one == hf_one == 1.0
    if name == "v4-checkpoint":
        # The slow pairs are interpolated (divided by the factor), the fast ones kept.
        base_freqs = 1.0 / (160000.0 ** (torch.arange(0, 16, 2, dtype=torch.float32) / 16))
        assert torch.equal(freqs[0], base_freqs[0])
        torch.testing.assert_close(freqs[-1], base_freqs[-1] / 16)


def test_truncate_false_keeps_the_correction_range_unrounded() -> None:
    """`truncate` is read from the kind's own parameters, as vLLM's get_rope reads it
    (transformers' V4 reads the top level, where V4 never has it, so it always rounds; no
    V4 checkpoint is known to set it)."""
    rope = {"factor": 8.0, "original_max_position_embeddings": 1024}
    rounded, _ = rope_table(_v4_config(rope), "compress")
    exact, _ = rope_table(_v4_config({**rope, "truncate": False}), "compress")
    assert torch.equal(rounded[0], exact[0])  # the fastest pair: kept either way
    assert not torch.equal(rounded, exact)  # the ramp's ends moved


def test_the_default_rope_is_one_over_base_powers() -> None:
    config = SimpleNamespace(head_dim=64, rope_parameters={
        "main": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}
    })
    freqs, scale = rope_table(config, "main")
    expected = 1.0 / (10000.0 ** (torch.arange(0, 16, 2, dtype=torch.float32) / 16))
    torch.testing.assert_close(freqs, expected, atol=0, rtol=0)
    assert scale == 1.0


def test_another_rope_type_is_refused_by_name() -> None:
    config = SimpleNamespace(head_dim=64, rope_parameters={
        "compress": {"rope_type": "longrope", "rope_theta": 160000.0}
    })
    with pytest.raises(ValueError, match=r"'compress' has rope_type 'longrope'.*default rope"):
        rope_table(config, "compress")


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_the_scale_multiplies_cos_and_sin(sign: float) -> None:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(5, 2, 32, generator=g)
    positions = torch.arange(100, 105)
    freqs = 1.0 / (160000.0 ** (torch.arange(0, 8, 2, dtype=torch.float32) / 8))
    plain = rotate(CpuOps(), x, positions, freqs, sign)
    scaled = rotate(CpuOps(), x, positions, freqs, sign, scale=1.1)
    torch.testing.assert_close(scaled[..., :-8], x[..., :-8], atol=0, rtol=0)
    torch.testing.assert_close(scaled[..., -8:], plain[..., -8:] * 1.1)
