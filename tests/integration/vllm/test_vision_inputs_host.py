"""The input side of a vision-language request on the plugin's host platform: vLLM's
multimodal processor expands the image placeholders to the ids transformers' processor
gives, and the M-RoPE positions vLLM's model computes from them (what the runner feeds
the rotary embedding) equal transformers' get_rope_index, for prompts with one image, two
images of different sizes and none; Qwen2.5-VL and Qwen3-VL.

No engine: vLLM's InputProcessor over the VllmConfig `vllm serve` would build. The
support matrix refuses the vision tower until the engine's greedy ids are proven against
transformers', so this test lifts that one row in its own process (the refusal itself is
test_doctor_serve_agreement.py's); everything else is the plugin's real configuration.
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


def _vllm_config(model_dir: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    from ascend_core.support import matrix
    from ascend_core.support.features import Feature
    from ports.device import DeviceKind

    lifted = matrix.Supported("lifted for the input-side test")
    monkeypatch.setattr(
        matrix, "MATRIX", {**matrix.MATRIX, (Feature.VISION, DeviceKind.CPU): lifted}
    )
    return EngineArgs(
        model=model_dir, dtype="float32", max_model_len=512,
        limit_mm_per_prompt={"image": 2, "video": 0},
        mm_processor_cache_gb=0,  # the request carries its processed data, not a cache key
    ).create_engine_config()


def _model_class(style: str) -> Any:
    if style == "qwen2_5_vl":
        from vllm.model_executor.models.qwen2_5_vl import Qwen2_5_VLForConditionalGeneration

        return Qwen2_5_VLForConditionalGeneration
    from vllm.model_executor.models.qwen3_vl import Qwen3VLForConditionalGeneration

    return Qwen3VLForConditionalGeneration


@pytest.mark.parametrize("style", STYLES)
def test_expanded_prompt_ids_and_m_rope_positions_equal_transformers(
    style: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers import AutoModelForImageTextToText, AutoProcessor
    from vllm.sampling_params import SamplingParams
    from vllm.v1.engine.input_processor import InputProcessor

    model_dir = str(make_models_module().make_vl_model(MODELS_DIR / f"tiny-{style}", style))
    config = _vllm_config(model_dir, monkeypatch)
    inputs = InputProcessor(config)
    processor = AutoProcessor.from_pretrained(model_dir)
    hf = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    # get_mrope_input_positions reads only the model's config: the class without weights.
    model = object.__new__(_model_class(style))
    object.__setattr__(model, "config", config.model_config.hf_config)

    image_token = hf.config.image_token_id
    images = _images()
    for batch in ([images[0]], images, []):
        content = [*({"type": "image"} for _ in batch), {"type": "text", "text": "def f(x):"}]
        text = processor.apply_chat_template(
            [{"role": "user", "content": content}], add_generation_prompt=True
        )
        expected = processor(text=[text], images=batch or None, return_tensors="pt")
        prompt = {"prompt": text, **({"multi_modal_data": {"image": batch}} if batch else {})}
        request = inputs.process_inputs(
            f"r{len(batch)}", prompt, SamplingParams(max_tokens=1), ("generate",)
        )
        ids = expected.input_ids[0].tolist()
        assert request.prompt_token_ids == ids, len(batch)
        assert len(request.mm_features or []) == len(batch)
        assert ids.count(image_token) == int(
            sum(g.prod() for g in expected.get("image_grid_thw", torch.zeros(0, 3)))
        ) // 4  # each merged 2x2 patch group is one placeholder

        positions, delta = model.get_mrope_input_positions(
            request.prompt_token_ids, request.mm_features or []
        )
        hf_positions, hf_delta = hf.model.get_rope_index(
            expected.input_ids, expected["mm_token_type_ids"],
            image_grid_thw=expected.get("image_grid_thw"),
            attention_mask=expected.attention_mask,
        )
        assert torch.equal(torch.as_tensor(positions), hf_positions[:, 0]), len(batch)
        assert int(delta) == int(hf_delta.flatten()[0]), len(batch)
        if batch:  # image tokens share a time step: the positions run behind the length
            assert int(delta) < 0
