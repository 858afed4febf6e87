"""The host fp32 engine the model-family modules share (one LLM a module) and its greedy
pass: batches of up to 8 prompts, chunked at 64 tokens, prefix caching on (a family that
cannot cache says so by passing enable_prefix_caching=False)."""

from __future__ import annotations

from typing import Any


def family_llm(model_dir: str, **overrides: Any) -> Any:
    from vllm import LLM

    settings: dict[str, Any] = dict(
        dtype="float32", max_model_len=512, max_num_batched_tokens=64, max_num_seqs=8,
        kv_cache_memory_bytes=32 << 20, enable_prefix_caching=True, seed=0,
    )
    return LLM(model=model_dir, **{**settings, **overrides})


def greedy_outputs(llm: Any, prompts: list[list[int]], max_new: int) -> list[Any]:
    """vLLM's RequestOutputs of a greedy pass that never stops early (ignore_eos)."""
    from vllm import SamplingParams, TokensPrompt

    params = SamplingParams(max_tokens=max_new, temperature=0.0, ignore_eos=True)
    return llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params,
                        use_tqdm=False)
