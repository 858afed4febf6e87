"""LoRA through the plugin on the host device: greedy ids equal transformers + peft.

One mixed batch: each prompt with adapter A, adapter B and none, side by side, so one
step's rows use different adapter slots (and -1). Both host paths: `compiled` (the
plan's Dynamo trace) and `eager`. Adapters are made with peft (scripts/make_models.py).
"""

from __future__ import annotations

import random

import pytest
from engine_teardown import shut_down

from support.lora_reference import lora_model, peft_greedy_ids

MAX_NEW = 10
LENGTHS = (5, 23, 40)


def _prompts() -> list[list[int]]:
    rng = random.Random(7)
    return [[rng.randrange(5, 500) for _ in range(n)] for n in LENGTHS]


@pytest.fixture(scope="module", params=["compiled", "eager"])
def served(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    from vllm import LLM

    base, adapters = lora_model()
    llm = LLM(
        model=str(base),
        dtype="float32",
        enforce_eager=request.param == "eager",
        enable_lora=True,
        max_loras=2,
        max_lora_rank=8,
        max_model_len=256,
        block_size=16,
        max_num_batched_tokens=64,
        max_num_seqs=8,
        kv_cache_memory_bytes=16 << 20,
        seed=0,
    )
    yield request.param, base, adapters, llm
    shut_down(llm)


def test_mixed_batch_equals_peft(served) -> None:  # type: ignore[no-untyped-def]
    from vllm import SamplingParams, TokensPrompt
    from vllm.lora.request import LoRARequest

    path, base, adapters, llm = served
    mode = llm.llm_engine.vllm_config.compilation_config.mode
    assert mode.name == ("DYNAMO_TRACE_ONCE" if path == "compiled" else "NONE")
    prompts = _prompts()
    requests = {
        None: None,
        **{
            name: LoRARequest(name, i + 1, str(d))
            for i, (name, d) in enumerate(sorted(adapters.items()))
        },
    }
    batch = [(name, p) for p in prompts for name in requests]
    params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True)
    outs = llm.generate(
        [TokensPrompt(prompt_token_ids=p) for _, p in batch],
        params,
        lora_request=[requests[name] for name, _ in batch],
        use_tqdm=False,
    )
    got = {
        (name, tuple(p)): list(o.outputs[0].token_ids)
        for (name, p), o in zip(batch, outs, strict=True)
    }
    for name in requests:
        want = peft_greedy_ids(base, adapters.get(name) if name else None, prompts, MAX_NEW)
        for p, ids in zip(prompts, want, strict=True):
            assert got[(name, tuple(p))] == ids, (path, name, len(p))
    # The adapters matter: each changes the ids of at least one prompt.
    for name in adapters:
        assert any(got[(name, tuple(p))] != got[(None, tuple(p))] for p in prompts), name
