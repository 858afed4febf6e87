"""vLLM's own Qwen2.5-VL and Qwen3-VL vision towers on the plugin's host platform, fp32:
the same image features (and Qwen3-VL's DeepStack features) as transformers' towers.

No engine: the tower alone, built as vLLM's model builds it (a VllmConfig in context, a
one-process tensor-parallel group), loading the tiny checkpoint's `visual.` weights.
Two images of different sizes in one call: variable-length sequences per image (Qwen2.5-VL
also windowed attention in its first block, full in its second).

What this proves about the out-of-tree platform (issue 47): vLLM's MMEncoderAttention is
built as our AscendMMEncoderAttention (registered out of tree), whose forward_oot computes
through the ops port's encoder_attention with the per-image (and per-window) lengths; the
language model's M-RoPE is our AscendMRotaryEmbedding, the port's mrope, which gives vLLM's
own forward_native on the host for chunked (Qwen2.5-VL) and interleaved (Qwen3-VL) sections.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from support.hf_reference import MODELS_DIR, make_models_module

STYLES = ("qwen2_5_vl", "qwen3_vl")
IMAGE_SIZES = ((64, 96), (100, 60))  # (height, width): different patch grids per image


@pytest.fixture(scope="module")
def vllm_context() -> Iterator[None]:
    """A default VllmConfig in context and a one-process gloo group (vLLM's parallel
    linear layers ask for their tensor-parallel size when built)."""
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    with set_current_vllm_config(VllmConfig()), tempfile.TemporaryDirectory() as tmp:
        init_distributed_environment(1, 0, f"file://{tmp}/group", 0, "gloo")
        initialize_model_parallel(1, 1)
        yield  # the conftest's module teardown destroys the group


def _images() -> list[Any]:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    return [
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for h, w in IMAGE_SIZES
    ]


def _hf_features(model_dir: str, pixels: torch.Tensor, grid: torch.Tensor):  # type: ignore[no-untyped-def]
    from transformers import AutoModelForImageTextToText

    hf = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        out = hf.model.visual(pixels, grid_thw=grid)
    deepstack = getattr(out, "deepstack_features", None)
    return out.pooler_output, (torch.cat(list(deepstack), dim=-1) if deepstack else None)


def _vllm_tower(style: str, config: Any, model_dir: str) -> torch.nn.Module:
    from safetensors.torch import load_file

    if style == "qwen2_5_vl":
        from vllm.model_executor.models.qwen2_5_vl import Qwen2_5_VisionTransformer as Tower
    else:
        from vllm.model_executor.models.qwen3_vl import Qwen3_VisionTransformer as Tower
    tower = Tower(config.vision_config, norm_eps=1e-6)
    weights = load_file(f"{model_dir}/model.safetensors")
    tower.load_weights(
        (name.split("visual.", 1)[1], w) for name, w in weights.items() if "visual." in name
    )
    return tower.eval()


@pytest.mark.parametrize("style", STYLES)
def test_the_vision_tower_gives_transformers_features_on_the_host(
    vllm_context: None, style: str
) -> None:
    from transformers import AutoConfig, AutoProcessor
    from vllm.model_executor.layers.attention.mm_encoder_attention import MMEncoderAttention
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    from adapters.vllm.layers.vision import AscendMMEncoderAttention

    assert current_platform.is_out_of_tree()
    model_dir = str(make_models_module().make_vl_model(MODELS_DIR / f"tiny-{style}", style))
    config = AutoConfig.from_pretrained(model_dir)
    inputs = AutoProcessor.from_pretrained(model_dir).image_processor(
        images=_images(), return_tensors="pt"
    )
    pixels, grid = inputs["pixel_values"].float(), inputs["image_grid_thw"]
    assert grid[0].tolist() != grid[1].tolist()
    expected, expected_deepstack = _hf_features(model_dir, pixels, grid)

    tower = _vllm_tower(style, config, model_dir)
    attention = [m for m in tower.modules() if isinstance(m, MMEncoderAttention)]
    assert len(attention) == config.vision_config.depth
    for layer in attention:
        assert layer.attn_backend is AttentionBackendEnum.TORCH_SDPA
        assert type(layer) is AscendMMEncoderAttention
        assert layer._forward_method.__func__ is AscendMMEncoderAttention.forward_oot
    with torch.no_grad():
        got = tower(pixels, grid_thw=grid.tolist())

    width = expected.shape[-1]
    assert got.shape[0] == expected.shape[0] == int(grid.prod(-1).sum()) // 4
    assert expected.std() > 0.1  # the tower's output is not flat (weights scaled by fan-in)
    torch.testing.assert_close(got[:, :width], expected, atol=2e-5, rtol=1e-4)
    if style == "qwen3_vl":  # DeepStack: vLLM appends the injected layers' features
        assert expected_deepstack is not None
        torch.testing.assert_close(got[:, width:], expected_deepstack, atol=2e-5, rtol=1e-4)
    else:
        assert got.shape[-1] == width


@pytest.mark.parametrize("style", STYLES)
def test_m_rope_runs_through_our_port_and_gives_vllms_own(vllm_context: None, style: str) -> None:
    from transformers import AutoConfig
    from vllm.model_executor.layers.rotary_embedding import get_rope

    from adapters.vllm.layers.vision import AscendMRotaryEmbedding

    model_dir = str(make_models_module().make_vl_model(MODELS_DIR / f"tiny-{style}", style))
    text = AutoConfig.from_pretrained(model_dir).text_config
    rope = get_rope(
        text.head_dim, text.max_position_embeddings, is_neox_style=True,
        rope_parameters=dict(text.rope_parameters), dtype=torch.float32,
    )
    assert type(rope) is AscendMRotaryEmbedding
    assert rope.mrope_section == [4, 6, 6] and rope.mrope_interleaved == (style == "qwen3_vl")
    # 3-D positions (time, height, width) whose rows differ: each section rotates by its own.
    tokens = 6
    positions = torch.stack(
        [torch.arange(tokens), torch.arange(tokens) // 2, torch.arange(tokens) % 3]
    )
    heads = text.num_attention_heads * text.head_dim
    query = torch.randn(tokens, heads, generator=torch.Generator().manual_seed(0))
    key = query[:, : text.num_key_value_heads * text.head_dim].clone()
    for pos in (positions, positions[0]):  # an image batch, a text-only batch
        ours = rope(pos, query.clone(), key.clone())  # CustomOp dispatch: forward_oot
        native = rope.forward_native(pos, query.clone(), key.clone())
        torch.testing.assert_close(ours[0], native[0], atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(ours[1], native[1], atol=1e-6, rtol=1e-6)
    q_3d, _ = rope(positions, query.clone(), key.clone())
    q_1d, _ = rope(positions[0], query.clone(), key.clone())
    assert not torch.allclose(q_3d, q_1d)  # height/width sections moved the rotation
