"""The engine and batch the speculative-decoding runs share (host and emulated NPU): a batch
of 8 mixed lengths whose prompts repeat a short phrase (so proposals exist), chunked prefill
(max_num_batched_tokens=64 is shorter than the long prompts), eager, and two passes, the
second through the prefix cache."""

from __future__ import annotations

import random
from typing import Any

LENGTHS = (3, 17, 33, 48, 64, 90, 129, 150)


def repeating_prompts(seed: int = 7) -> list[list[int]]:
    """Per length, a random phrase of 3-8 tokens repeated up to it."""
    rng = random.Random(seed)
    prompts = []
    for n in LENGTHS:
        phrase = [rng.randrange(2, 500) for _ in range(rng.randrange(3, 9))]
        prompts.append((phrase * (n // len(phrase) + 1))[:n])
    return prompts


def spec_llm(
    model: str,
    spec: dict[str, object] | None,
    dtype: str,
    block_size: int,
    graphs: dict[str, object] | None = None,
) -> Any:
    """An LLM of the shared shape, speculating as `spec` says (None: not at all); eager,
    or with `graphs` (a compilation_config: graph mode and capture sizes) not."""
    from vllm import LLM

    return LLM(
        model=model,
        dtype=dtype,
        enforce_eager=graphs is None,
        **({} if graphs is None else {"compilation_config": graphs}),
        max_model_len=512,
        block_size=block_size,
        max_num_batched_tokens=64,
        max_num_seqs=8,
        kv_cache_memory_bytes=32 << 20,
        enable_prefix_caching=True,
        seed=0,
        speculative_config=spec,
        disable_log_stats=False,
    )


def two_passes(llm: Any, prompts: list[list[int]], max_new: int) -> dict[str, Any]:
    """Greedy ids of both passes, the second pass's cached tokens and vLLM's metrics."""
    from vllm import SamplingParams, TokensPrompt

    params = SamplingParams(max_tokens=max_new, temperature=0.0, ignore_eos=True)
    batch = [TokensPrompt(prompt_token_ids=p) for p in prompts]
    passes = [llm.generate(batch, params, use_tqdm=False) for _ in range(2)]
    return {
        "ids": [[list(o.outputs[0].token_ids) for o in outs] for outs in passes],
        "cached": [o.num_cached_tokens for o in passes[1]],
        "metrics": {m.name: m for m in llm.get_metrics()},
    }


def seeded_indices(prompts: list[list[int]]) -> list[int]:
    """Which prompts seeded_passes samples, in its order: the three shortest, then the
    longest (its prefill chunked)."""
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    return [*order[:3], order[-1]]


def seeded_passes(llm: Any, prompts: list[list[int]], max_new: int) -> list[list[list[int]]]:
    """Two passes of random sampling (temperature 1, top-p 0.95), each request with its
    own seed: the ids of both, which repeat exactly when seeding holds.

    llama_repeat is sure of its next token (logit margins of 80-100 over the runner-up), so
    its draws are its greedy ids, which the distribution-preserving verification must then
    return; tiny deepseek_v3_mtp on the host is not, so its draws leave the greedy ids
    (its npu-mla twin in bf16 on the emulated NPU is sure again once it repeats).

    The three shortest prompts and the longest, whose prefill is chunked: its discarded
    samples are undone on the CPU generator (the host's, and the emulated NPU's) by the
    runners' SeededRewindMixin, where vLLM's own rewind (set_offset) would stop the engine."""
    from vllm import SamplingParams, TokensPrompt

    batch = [TokensPrompt(prompt_token_ids=prompts[i]) for i in seeded_indices(prompts)]
    params = [
        SamplingParams(max_tokens=max_new, temperature=1.0, top_p=0.95, seed=100 + i,
                       ignore_eos=True)
        for i in range(len(batch))
    ]
    return [
        [list(o.outputs[0].token_ids) for o in llm.generate(batch, params, use_tqdm=False)]
        for _ in range(2)
    ]
