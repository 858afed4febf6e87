"""The input side of a vision-language request on the plugin's host platform: vLLM's
multimodal processor expands the image placeholders to the ids transformers' processor
gives, and the M-RoPE positions vLLM's model computes from them (what the runner feeds
the rotary embedding) equal transformers' get_rope_index, for prompts with one image, two
images of different sizes and none; Qwen2.5-VL and Qwen3-VL.

No engine and no VllmConfig (the support matrix refuses the vision tower when one is built
on our platform, until the engine's greedy ids are proven: test_doctor_serve_agreement.py):
vLLM's multimodal processor for the ModelConfig `vllm serve` reads, fed as vLLM's input
processor feeds it (the prompt's token ids and the parsed image items), and the request's
features built from its output as the engine builds them for the runner.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from support.hf_reference import MODELS_DIR, make_models_module

STYLES = ("qwen2_5_vl", "qwen3_vl")
IMAGE_SIZES = ((64, 96), (100, 60))


def _images() -> list[Any]:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    return [
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for h, w in IMAGE_SIZES
    ]


def _vllm_processor(model_dir: str) -> Any:
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY

    config = ModelConfig(
        model=model_dir, dtype="float32", max_model_len=512,
        limit_mm_per_prompt={"image": 2, "video": 0},
        mm_processor_cache_gb=0,  # the output carries its processed data, not a cache key
    )
    return config, MULTIMODAL_REGISTRY.create_processor(config)


def _expand(processor: Any, token_ids: list[int], images: list[Any]) -> tuple[list[int], list[Any]]:
    """vLLM's expanded prompt ids and the request's multimodal features."""
    from vllm.multimodal.inputs import MultiModalFeatureSpec
    from vllm.multimodal.processing.context import TimingContext
    from vllm.multimodal.processing.inputs import ProcessorInputs

    items = processor.info.parse_mm_data({"image": images} if images else {})
    out = processor.apply(ProcessorInputs(prompt=token_ids, mm_data_items=items), TimingContext())
    features = [
        MultiModalFeatureSpec(data=data, modality="image", identifier=key, mm_position=place)
        for data, key, place in zip(
            out["mm_kwargs"].get("image", []), out["mm_hashes"].get("image", []),
            out["mm_placeholders"].get("image", []), strict=True,
        )
    ]
    return list(out["prompt_token_ids"]), features


def _model_class(style: str) -> Any:
    if style == "qwen2_5_vl":
        from vllm.model_executor.models.qwen2_5_vl import Qwen2_5_VLForConditionalGeneration

        return Qwen2_5_VLForConditionalGeneration
    from vllm.model_executor.models.qwen3_vl import Qwen3VLForConditionalGeneration

    return Qwen3VLForConditionalGeneration


@pytest.mark.parametrize("style", STYLES)
def test_expanded_prompt_ids_and_m_rope_positions_equal_transformers(style: str) -> None:
    from transformers import AutoModelForImageTextToText, AutoProcessor

    model_dir = str(make_models_module().make_vl_model(MODELS_DIR / f"tiny-{style}", style))
    config, expander = _vllm_processor(model_dir)
    processor = AutoProcessor.from_pretrained(model_dir)
    hf = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    # get_mrope_input_positions reads only the model's config: the class without weights.
    model = object.__new__(_model_class(style))
    object.__setattr__(model, "config", config.hf_config)

    image_token = hf.config.image_token_id
    images = _images()
    for batch in ([images[0]], images, []):
        content = [*({"type": "image"} for _ in batch), {"type": "text", "text": "def f(x):"}]
        text = processor.apply_chat_template(
            [{"role": "user", "content": content}], add_generation_prompt=True
        )
        expected = processor(text=[text], images=batch or None, return_tensors="pt")
        prompt_ids, features = _expand(expander, processor.tokenizer(text).input_ids, batch)
        ids = expected.input_ids[0].tolist()
        assert prompt_ids == ids, len(batch)
        assert len(features) == len(batch)
        assert ids.count(image_token) == int(
            sum(g.prod() for g in expected.get("image_grid_thw", torch.zeros(0, 3)))
        ) // 4  # each merged 2x2 patch group is one placeholder

        positions, delta = model.get_mrope_input_positions(prompt_ids, features)
        hf_positions, hf_delta = hf.model.get_rope_index(
            expected.input_ids, expected["mm_token_type_ids"],
            image_grid_thw=expected.get("image_grid_thw"),
            attention_mask=expected.attention_mask,
        )
        assert torch.equal(torch.as_tensor(positions), hf_positions[:, 0]), len(batch)
        assert int(delta) == int(hf_delta.flatten()[0]), len(batch)
        if batch:  # image tokens share a time step: the positions run behind the length
            assert int(delta) < 0
