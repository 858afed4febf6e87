"""ModelSlim exports through `--quantization ascend` on the host device give the greedy
ids of the fake-quant reference (support.quant_reference): the float model in
transformers with each quantized linear replaced by its scheme's integer math.

fp32: ids equal, batched (8 mixed lengths), chunked (max_num_batched_tokens=64 is
shorter than the long prompts) and prefix-cached (a second pass), on the compiled default
path for the mixed exports (static W8A8 and W8A8_DYNAMIC layers beside float ones, Llama
and Qwen3) and W4A8_DYNAMIC, and eagerly for the all-W8A8_DYNAMIC Llama export. bf16 and
fp16: the plugin and transformers round in different places outside the quantized linears (as in
test_bf16_agreement), and a nudged activation can move an int8 rounding, so each token
must be the reference's top-1 within the same 0.25-nat tolerance.
"""

from __future__ import annotations

import random

import pytest
import torch
from engine_teardown import shut_down

from support.hf_reference import load as load_float
from support.hf_reference import local_model
from support.quant_reference import (
    chosen_logprobs,
    fake_quant_model,
    greedy_token_ids,
    local_export,
    teacher_forced_gaps,
)

MAX_NEW = 12
BLOCK = 16
TOLERANCE_NATS = 0.25
NOISE_NATS = 1e-4  # float32 noise in a served logprob (measured: 1e-7 to 2e-5)
# a few int8 steps of one activation and what they carry to the tokens after it (measured:
# one step 4.9e-3; compiled DeepSeek-V3 W8A8_DYNAMIC on the Intel host, up to 2.05e-2)
INT8_STEPS_NATS = 5e-2
# Compiled: the mixed exports hold both int8 linear methods (each export's own engine would
# run the same two methods through the same trace again).
CASES = [("llama", "mixed"), ("qwen3", "mixed")]
# Every decoder linear W4A8_DYNAMIC (int4, per channel): the compiled path only.
INT4_CASES = [("llama", "w4a8_dynamic", "compiled")]


def _prompts(seed: int, lengths: list[int]) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(2, 500) for _ in range(n)] for n in lengths]


def _llm(model: str, dtype: str, eager: bool = True, **kwargs):  # type: ignore[no-untyped-def]
    from vllm import LLM

    return LLM(model=model, dtype=dtype, enforce_eager=eager, max_model_len=512,
               block_size=BLOCK, max_num_batched_tokens=64, max_num_seqs=8,
               kv_cache_memory_bytes=32 << 20, enable_prefix_caching=True, seed=0, **kwargs)


def _generate(llm, prompts: list[list[int]]):  # type: ignore[no-untyped-def]
    from vllm import SamplingParams, TokensPrompt

    params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True)
    return llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params,
                        use_tqdm=False)


# The host paths: `compiled` is the default (the plan's one Dynamo trace, Inductor over
# our ops and the int8 linear methods), `eager` is enforce_eager.
# Eagerly: one case (the linear methods are the same ops on both paths; what differs is
# Dynamo and Inductor around them, which the compiled cases cover for every method).
EAGER_CASES = [("llama", "w8a8_dynamic", "eager")]


@pytest.fixture(scope="module",
                params=[(*c, "compiled") for c in CASES] + EAGER_CASES + INT4_CASES,
                ids=lambda p: "-".join(p))
def served(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    style, scheme, path = request.param
    export = str(local_export(style, scheme))
    # no --quantization: chosen from the description
    llm = _llm(export, "float32", eager=path == "eager")
    mode = llm.llm_engine.vllm_config.compilation_config.mode
    assert mode.name == ("DYNAMO_TRACE_ONCE" if path == "compiled" else "NONE")
    yield style, scheme, export, llm
    shut_down(llm)


def test_the_export_serves_with_int8_weights(served) -> None:  # type: ignore[no-untyped-def]
    from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod

    from adapters.vllm.quantization.linear import (
        AscendW8A8DynamicLinearMethod,
        AscendW8A8LinearMethod,
    )
    from adapters.vllm.quantization.linear_w4a8 import AscendW4A8DynamicLinearMethod

    _, scheme, _, llm = served
    assert llm.llm_engine.vllm_config.model_config.quantization == "ascend"
    model = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
    methods = {name: type(m.quant_method) for name, m in model.named_modules()
               if isinstance(m, LinearBase)}
    expected = {
        "w8a8_dynamic": {AscendW8A8DynamicLinearMethod},
        "w4a8_dynamic": {AscendW4A8DynamicLinearMethod},
        "mixed": {AscendW8A8LinearMethod, AscendW8A8DynamicLinearMethod,
                  UnquantizedLinearMethod},
    }[scheme]
    assert set(methods.values()) == expected
    for name, m in model.named_modules():
        if isinstance(m, LinearBase) and methods[name] is not UnquantizedLinearMethod:
            assert m.weight.dtype == torch.int8, name
        if scheme == "w4a8_dynamic" and isinstance(m, LinearBase):
            # the host holds the int4 values one per int8, as unpacked at load
            assert int(m.weight.abs().max()) <= 8 and m.weight.min() >= -8, name
            assert m.weight.shape[0] == m.scale_bias.shape[0], name
    if scheme == "mixed":  # layer 1's down_proj is FLOAT in the mixed export
        assert methods["model.layers.1.mlp.down_proj"] is UnquantizedLinearMethod
        assert model.model.layers[1].mlp.down_proj.weight.dtype == torch.float32


def test_batched_chunked_and_prefix_cached_ids_equal_the_fake_quant_reference(served) -> None:  # type: ignore[no-untyped-def]
    _, _, export, llm = served
    check_batched_chunked_and_cached_ids(llm, export)


def check_batched_chunked_and_cached_ids(llm, export: str) -> None:  # type: ignore[no-untyped-def]
    """8 mixed lengths (the long ones prefilled in chunks), twice: the fake-quant ids both
    times, the second from the prefix cache."""
    prompts = _prompts(2, [3, 17, 33, 48, 64, 90, 129, 200])
    expected = greedy_token_ids(export, prompts, MAX_NEW)
    first = _generate(llm, prompts)
    assert [list(o.outputs[0].token_ids) for o in first] == expected
    second = _generate(llm, prompts)
    assert [list(o.outputs[0].token_ids) for o in second] == expected
    cached = [o.num_cached_tokens for o in second]
    assert all(c >= (len(p) - 1) // BLOCK * BLOCK for c, p in zip(cached, prompts, strict=True))


def test_logprobs_follow_the_quantized_model_not_the_float_one(served) -> None:  # type: ignore[no-untyped-def]
    """Ids alone could agree with the float model too (tiny models, 12 tokens); the
    logprobs show which model vLLM computed: the fake-quant one to float32 noise, the
    float one measurably further away."""
    style, _, export, llm = served
    check_logprobs_follow_the_quantized_model(llm, style, export)


def check_logprobs_follow_the_quantized_model(llm, style: str, export: str) -> None:  # type: ignore[no-untyped-def]
    """Served logprobs: the fake-quant model's to float32 noise on most tokens and within a
    few int8 steps on all, the float model's far off.

    Per token, not only the largest difference: activation quantization (per-token
    dynamic scales most of all) is discontinuous. A float32-noise difference upstream of a
    quantizer (the host's attention sums in its own order, not transformers' SDPA's, as
    the NPU's fused attention does too) can carry one activation across an int8 rounding
    step, which moves the logprobs after it by a few 1e-3 nats: measured on the
    W8A8_DYNAMIC Llama, 4.9e-3 and 1.0e-3 on 2 tokens of 24, the other 22 at most 1.3e-4
    (docs/benchmarks.md, Round 13). A crossing can stay in the KV cache, which is what
    this looks like: on the Intel host, compiled DeepSeek-V3 W8A8_DYNAMIC moved 5 of one
    prompt's 12 tokens, its 3rd on, by 6.0e-3 to 2.05e-2 (the float model: 0.04 to 0.32
    on those), the other 19 of 24 within 1e-5 (docs/benchmarks.md, Round 16). The float
    model is off on nearly every token (within 1e-4 on at most 1 of 24 measured).
    """
    from vllm import SamplingParams, TokensPrompt

    prompts = _prompts(4, [20, 70])
    params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True, logprobs=0)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params,
                        use_tqdm=False)
    generated = [list(o.outputs[0].token_ids) for o in outs]
    served_lp = torch.tensor([[lp[t].logprob for lp, t in zip(o.outputs[0].logprobs, g,
                                                               strict=True)]
                              for o, g in zip(outs, generated, strict=True)])
    quant_lp = torch.tensor(chosen_logprobs(fake_quant_model(export), prompts, generated))
    float_model, _ = load_float(str(local_model(style)))
    float_lp = torch.tensor(chosen_logprobs(float_model, prompts, generated))
    to_quant = (served_lp - quant_lp).abs().flatten()
    to_float = (served_lp - float_lp).abs().flatten()
    near_quant = float((to_quant < NOISE_NATS).float().mean())
    near_float = float((to_float < NOISE_NATS).float().mean())
    assert near_quant >= 0.75, to_quant.tolist()
    assert float(to_quant.max()) < INT8_STEPS_NATS, to_quant.tolist()
    assert near_float < 0.25, to_float.tolist()
    assert float(to_float.median()) > 100 * max(float(to_quant.median()), 1e-6), (
        to_quant.tolist(), to_float.tolist())


HALF_CASES = [("w8a8", "bfloat16", None), ("w8a8_dynamic", "bfloat16", None),
              ("mixed", "bfloat16", None), ("mixed", "float16", "float16")]


@pytest.mark.parametrize(("scheme", "dtype", "export_dtype"), HALF_CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in HALF_CASES])
def test_half_precision_tokens_are_the_fake_quant_top1_within_tolerance(
    scheme: str, dtype: str, export_dtype: str | None
) -> None:
    """bf16 from the fp32 export; fp16 from a float16 export, whose deq_scale is int64
    (float32 bits) and is applied at FP19, as the NPU's int64 scale path takes it."""
    export = str(local_export("llama", scheme, dtype=export_dtype))
    prompts = _prompts(3, [9, 40, 130])
    llm = _llm(export, dtype, quantization="ascend")  # the flag, as users pass it
    try:
        generated = [list(o.outputs[0].token_ids) for o in _generate(llm, prompts)]
    finally:
        shut_down(llm)
    worst = teacher_forced_gaps(export, prompts, generated, getattr(torch, dtype))
    assert worst <= TOLERANCE_NATS, f"a token {worst:.3f} nats below the reference's top-1"
