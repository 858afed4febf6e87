"""Hugging Face transformers as the reference implementation."""

from __future__ import annotations


def hf_greedy(model_dir: str, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """Hugging Face transformers' greedy continuation of each prompt, one at a time, fp32."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.generation_config.eos_token_id = None  # vLLM runs with ignore_eos
    results = []
    with torch.no_grad():
        for ids in prompts:
            inp = torch.tensor([ids])
            out = model.generate(
                inp, attention_mask=torch.ones_like(inp), max_new_tokens=max_new_tokens,
                min_new_tokens=max_new_tokens, do_sample=False, pad_token_id=0,
            )
            results.append(out[0, len(ids):].tolist())
    return results
