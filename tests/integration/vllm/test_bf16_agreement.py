"""bf16 through the plugin: each greedy token vLLM picks is HF's top-1, or within a small
logprob gap of it.

Tolerance: bf16 keeps 8 mantissa bits (relative step 2^-8 ~ 0.4%). Logits of these tiny
models are O(10), so two implementations that round in different places (fused residual
add, attention accumulation order) can move a logit by ~0.05-0.1; a token whose HF logprob
is within 0.25 nats of HF's best is a legitimate near-tie, not a bug. A real bug (wrong
cache slot, wrong mask, wrong rotary) moves tokens by whole nats.

MoE models are discontinuous in their inputs: when two experts' router scores are
within bf16 rounding of each other, the choice flips, and with random experts the
output moves by whole nats. Measured on these prompts, transformers' own bf16 run
differs from its fp32 run by up to 4.1 (Qwen3-MoE) and 7.3 (DeepSeek-V3) nats of
prompt logprob at single positions. So for MoE styles the bound is on the rate: at
most one generated token in 16 may fall outside the tolerance (measured: 1 of 48 for
Qwen3-MoE and DeepSeek-V3, 0 for DeepSeek-V2-Lite); a systematic bug (routing,
latent cache, absorbed decode) fails most tokens, not one.
"""

from __future__ import annotations

import random

import pytest
from engine_teardown import shut_down

from support.hf_reference import load

TOLERANCE_NATS = 0.25
MAX_NEW = 16
MOE_STYLES = {"qwen3_moe", "deepseek_v3", "deepseek_v2"}
MOE_OUTLIERS_PER_TOKEN = 1 / 16


# Compiled (the host's default) for a dense style and an MLA + MoE style; eagerly for the
# other three, whose ops are the compiled ones without Inductor around them (each style is
# compiled in float32 by test_generate_matches_hf, and Inductor's bf16 lowering of the
# custom ops is checked on Qwen3 and DeepSeek-V2 here; DeepSeek-V3 and Qwen3-MoE in bf16
# are also the host references of the emulated NPU's MoE tests).
CASES = [("qwen3", "compiled"), ("deepseek_v2", "compiled"), ("llama", "eager"),
         ("qwen3_moe", "eager"), ("deepseek_v3", "eager")]


@pytest.mark.parametrize(("style", "path"), CASES, ids=[f"{s}-{p}" for s, p in CASES])
def test_bf16_tokens_are_hf_top1_within_tolerance(
    style: str, path: str, model_dirs: dict[str, str]
) -> None:
    import torch
    from vllm import LLM, SamplingParams, TokensPrompt

    rng = random.Random(3)
    prompts = [[rng.randrange(2, 500) for _ in range(n)] for n in (9, 40, 130)]
    llm = LLM(model=model_dirs[style], dtype="bfloat16", enforce_eager=path == "eager",
              max_model_len=512, block_size=16, kv_cache_memory_bytes=32 << 20, seed=0)
    mode = llm.llm_engine.vllm_config.compilation_config.mode
    assert mode.name == ("DYNAMO_TRACE_ONCE" if path == "compiled" else "NONE")
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts],
                        SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True),
                        use_tqdm=False)
    shut_down(llm)

    hf, _ = load(model_dirs[style], torch.bfloat16)  # AutoModelForCausalLM, cached
    worst = 0.0
    gaps_all: list[float] = []
    with torch.no_grad():
        for prompt, out in zip(prompts, outs, strict=True):
            generated = list(out.outputs[0].token_ids)
            seq = torch.tensor([prompt + generated])
            logprobs = torch.log_softmax(hf(seq).logits[0].float(), dim=-1)
            # Row i predicts token i+1: score vLLM's choices under HF, teacher-forced.
            rows = logprobs[len(prompt) - 1 : len(prompt) - 1 + len(generated)]
            chosen = rows[torch.arange(len(generated)), torch.tensor(generated)]
            gaps = rows.max(dim=-1).values - chosen
            worst = max(worst, float(gaps.max()))
            gaps_all += gaps.tolist()
    if style in MOE_STYLES:
        outliers = [g for g in gaps_all if g > TOLERANCE_NATS]
        assert len(outliers) <= MOE_OUTLIERS_PER_TOKEN * len(gaps_all), (
            f"{len(outliers)} of {len(gaps_all)} tokens beyond {TOLERANCE_NATS} nats: {outliers}"
        )
    else:
        assert worst <= TOLERANCE_NATS, f"a token {worst:.3f} nats below HF's top-1"
