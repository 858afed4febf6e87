"""`vllm serve --enable-lora` on the host device: an adapter loaded at run time
(/v1/load_lora_adapter) is listed and served by name, and answers as transformers + peft.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_serve import Server

from support.lora_reference import lora_model, peft_greedy_ids

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]

PROMPT = [7, 123, 45, 301, 99, 12, 250]
MAX_NEW = 8


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict]]:  # type: ignore[type-arg]
    base, adapters = lora_model()
    srv = Server(
        str(base),
        tmp_path_factory.mktemp("log") / "serve-lora.log",
        extra=("--enable-lora", "--max-loras", "2", "--max-lora-rank", "8"),
        extra_env={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"},
    )
    try:
        srv.wait_ready()
        yield srv, {"base": base, **adapters}
    finally:
        srv.stop()


def test_adapter_loaded_at_run_time_is_served_by_name(served) -> None:  # type: ignore[no-untyped-def]
    import httpx

    srv, dirs = served
    loaded = httpx.post(
        f"{srv.url}/v1/load_lora_adapter",
        json={"lora_name": "lora-a", "lora_path": str(dirs["lora-a"])},
        timeout=120,
    )
    assert loaded.status_code == 200, loaded.text
    models = httpx.get(f"{srv.url}/v1/models", timeout=10).json()
    assert "lora-a" in [m["id"] for m in models["data"]]

    def complete(model: str) -> list[int]:
        answer = httpx.post(
            f"{srv.url}/v1/completions",
            json={
                "model": model, "prompt": PROMPT, "max_tokens": MAX_NEW, "temperature": 0.0,
                "ignore_eos": True, "return_token_ids": True,
            },
            timeout=120,
        )
        assert answer.status_code == 200, answer.text
        return list(answer.json()["choices"][0]["token_ids"])

    with_adapter, without = complete("lora-a"), complete(srv.model)
    assert with_adapter == peft_greedy_ids(dirs["base"], dirs["lora-a"], [PROMPT], MAX_NEW)[0]
    assert without == peft_greedy_ids(dirs["base"], None, [PROMPT], MAX_NEW)[0]
    assert with_adapter != without
