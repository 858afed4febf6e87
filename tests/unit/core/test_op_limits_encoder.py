"""A vision tower's attention on the NPU (npu_fused_infer_attention_score, BSND without a
cache): the heads and head sizes its docs refuse, refused by the plan before weights load,
naming the model, the head size and the fix; the towers the plugin serves pass."""

from __future__ import annotations

import pytest

from ascend_core.errors import ConfigError
from ascend_core.model_facts import model_facts_from_config
from ascend_core.op_limits import encoder_attention_problems
from ascend_core.plan import plan_config
from unit.core.plan_fixtures import dense_model, host, npu

ARCH = "Qwen3VLForConditionalGeneration"


def _tower(heads: int, size: int, dtype: str = "bfloat16"):  # type: ignore[no-untyped-def]
    return dense_model(architecture=ARCH, vision=True, dtype=dtype, vision_heads=heads,
                       vision_head_size=size)


def _errors(deployment) -> list[ConfigError]:  # type: ignore[no-untyped-def]
    return [e for e in plan_config(deployment).errors if "vision tower" in e.what]


@pytest.mark.parametrize(("heads", "size"), [(16, 80), (16, 72), (2, 32), (25, 128),
                                             (16, 256), (8, 512)])
def test_the_towers_the_op_takes_pass(heads: int, size: int) -> None:
    """Qwen2.5-VL (16 x 80), Qwen3-VL (16 x 72: 144 bytes, unaligned but <= 128), the
    tiny test towers, InternViT-6B-like 25 x 128, aligned widths up to 512."""
    assert not _errors(npu(_tower(heads, size)))


@pytest.mark.parametrize(("heads", "size", "said"), [
    (16, 136, "head size 136 (272 bytes, not a multiple of 32: such a head size only up to 128)"),
    (4, 576, "head size 576 (at most 512)"),
    (320, 64, "320 heads per device (at most 256)"),
    (256, 256, "heads x head size 65536 (below 65535 in BSND)"),
])
def test_heads_and_sizes_the_op_refuses_are_refused_with_the_model_and_the_fix(
    heads: int, size: int, said: str
) -> None:
    (error,) = _errors(npu(_tower(heads, size)))
    assert error.what.startswith(f"{ARCH} on an NPU: its vision tower's attention "
                                 f"({heads} heads of size {size}, vision_config)")
    assert "npu_fused_infer_attention_score in its BSND encoder layout" in error.what
    assert said in error.what
    assert "VLLM_ASCEND_DEVICE=cpu" in error.hint and "--limit-mm-per-prompt" in error.hint


def test_tensor_parallelism_splits_the_heads() -> None:
    model = _tower(512, 64)
    assert _errors(npu(model))
    assert not _errors(npu(model, parallel={"tp": 2}))  # 256 heads of 64 per device


def test_an_idle_tower_the_host_and_unknown_heads_are_not_refused() -> None:
    model = _tower(16, 136)
    assert not _errors(npu(model, mm_off={"image", "video"}))
    assert not _errors(host(model))
    assert not _errors(npu(_tower(0, 0)))
    assert _errors(npu(model, mm_off={"video"}))  # images still reach the tower


def test_the_alignment_rule_counts_bytes() -> None:
    assert encoder_attention_problems(16, 136, 2)  # 272 bytes
    assert not encoder_attention_problems(16, 144, 2)  # 288 bytes: aligned
    assert not encoder_attention_problems(16, 120, 2)  # unaligned, but <= 128


def test_the_facts_read_the_towers_heads_from_vision_config() -> None:
    text = {"architectures": [ARCH], "hidden_size": 64, "num_attention_heads": 4,
            "num_hidden_layers": 2}
    qwen3 = model_facts_from_config({**text, "vision_config": {
        "hidden_size": 1152, "num_heads": 16}})
    assert (qwen3.vision_heads, qwen3.vision_head_size) == (16, 72)
    qwen2 = model_facts_from_config({**text, "vision_config": {  # hidden_size: the LM's
        "embed_dim": 1280, "hidden_size": 3584, "num_heads": 16}})
    assert (qwen2.vision_heads, qwen2.vision_head_size) == (16, 80)
    siglip = model_facts_from_config({**text, "vision_config": {
        "hidden_size": 1152, "num_attention_heads": 16, "head_dim": 96}})
    assert (siglip.vision_heads, siglip.vision_head_size) == (16, 96)
    unknown = model_facts_from_config({**text, "vision_config": {"depth": 2}})
    assert (unknown.vision_heads, unknown.vision_head_size) == (0, 0)
    assert model_facts_from_config(text).vision_heads == 0
