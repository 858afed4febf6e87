"""`vllm serve` of a small Qwen2.5-VL-style model on the host (fp32, eager), one server for
the module: a chat with two images (image_url data: URLs, two sizes) is answered with
transformers' greedy continuation of the prompt the server rendered (its /tokenize ids, the
images expanded, equal to the processor's); a malformed image and a third image past
--limit-mm-per-prompt get a 4xx, and the next request is answered as before.
"""

from __future__ import annotations

import base64
import io
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from support.hf_reference import MODELS_DIR, make_models_module

sys.path.insert(0, str(Path(__file__).parent))
from test_serve import Server

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]
MAX_NEW = 8
IMAGE_SIZES = ((64, 96), (100, 60), (80, 80))
TEXT = "Compare the two pictures."


def _png(image: Any) -> str:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _messages(urls: list[str]) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": {"url": u}} for u in urls
    ]
    return [{"role": "user", "content": [*content, {"type": "text", "text": TEXT}]}]


@pytest.fixture(scope="module")
def images() -> list[Any]:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    return [
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for h, w in IMAGE_SIZES
    ]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    model_dir = make_models_module().make_vl_model(MODELS_DIR / "tiny-qwen2_5_vl", "qwen2_5_vl")
    log = tmp_path_factory.mktemp("log") / "serve-vl.log"
    srv = Server(
        str(model_dir), log,
        extra=["--limit-mm-per-prompt", '{"image": 2, "video": 0}',
               "--max-num-batched-tokens", "128"],  # image prompts prefill in chunks
    )
    try:
        srv.wait_ready(timeout=600)
        yield srv
    finally:
        srv.stop()


def _chat(server: Server, messages: list[dict[str, Any]]) -> Any:
    import httpx

    return httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": server.model, "messages": messages, "max_tokens": MAX_NEW,
              "temperature": 0, "ignore_eos": True},
        timeout=300,
    )


def _transformers_greedy(model_dir: str, images: list[Any], messages: list[dict[str, Any]],
                         rendered: list[int]) -> list[int]:
    """transformers' greedy continuation of the server's rendered ids, after checking the
    processor renders the same chat (template and image expansion) to the same ids."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(model_dir)
    chat = processor.apply_chat_template(
        [{"role": "user", "content": [*({"type": "image"} for _ in images),
                                      {"type": "text", "text": TEXT}]}],
        add_generation_prompt=True,
    )
    inputs = processor(text=[chat], images=images, return_tensors="pt")
    assert inputs.input_ids[0].tolist() == rendered
    hf = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        out = hf.generate(**inputs, max_new_tokens=MAX_NEW, min_new_tokens=MAX_NEW,
                          do_sample=False)
    return list(out[0, len(rendered):].tolist())


def test_two_image_chat_is_transformers_greedy_and_bad_images_get_4xx(
    server: Server, images: list[Any]
) -> None:
    import httpx

    two = images[:2]
    messages = _messages([_png(i) for i in two])
    r = _chat(server, messages)
    assert r.status_code == 200, r.text[:400]
    answer = r.json()
    assert answer["usage"]["completion_tokens"] == MAX_NEW

    rendered = httpx.post(
        f"{server.url}/tokenize",
        json={"model": server.model, "messages": messages, "add_generation_prompt": True},
        timeout=120,
    )
    assert rendered.status_code == 200, rendered.text[:400]
    ids = rendered.json()["tokens"]
    assert answer["usage"]["prompt_tokens"] == len(ids)
    expected = _transformers_greedy(server.model, two, messages, ids)

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(server.model)
    text = tokenizer.decode(expected, skip_special_tokens=True)
    assert answer["choices"][0]["message"]["content"] == text

    not_an_image = "data:image/png;base64," + base64.b64encode(b"not a png at all").decode()
    truncated = _png(images[0])[:200]
    for bad in (_messages([not_an_image]), _messages([truncated]),
                _messages([_png(i) for i in images])):  # three images, the limit is two
        r = _chat(server, bad)
        assert 400 <= r.status_code < 500, (r.status_code, r.text[:400])

    again = _chat(server, messages)
    assert again.status_code == 200, again.text[:400]
    assert again.json()["choices"][0]["message"]["content"] == text
