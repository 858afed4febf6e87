"""ModelSlim W8A8_DYNAMIC exports of the MoE styles (Qwen3-MoE; DeepSeek-V3 with MLA, shared
experts and grouped sigmoid routing) on the host device give the greedy ids of the
fake-quant reference (support.quant_reference: transformers with each expert's and each
linear's projections replaced by the scheme's integer math), fp32, batched, chunked
(max_num_batched_tokens=64) and prefix-cached, compiled (the host's default) and eager.
The routed experts run through
AscendW8A8DynamicMoeMethod with int8 weights; the router stays float.
"""

from __future__ import annotations

import pytest
import torch
from engine_teardown import shut_down
from test_quantized_generate import BLOCK, MAX_NEW, PATHS, _generate, _llm, _prompts

from support.hf_reference import load as load_float
from support.hf_reference import local_model
from support.quant_reference import (
    chosen_logprobs,
    fake_quant_model,
    greedy_token_ids,
    local_export,
)

STYLES = ("qwen3_moe", "deepseek_v3")


@pytest.fixture(scope="module", params=[(s, p) for p in PATHS for s in STYLES],
                ids=lambda p: "-".join(p))
def served(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    style, path = request.param
    export = str(local_export(style, "w8a8_dynamic"))
    # no --quantization: chosen from the description
    llm = _llm(export, "float32", eager=path == "eager")
    yield style, export, llm
    shut_down(llm)


def _model(llm):  # type: ignore[no-untyped-def]
    return llm.llm_engine.model_executor.driver_worker.worker.model_runner.model


def test_experts_are_int8_and_the_router_float(served) -> None:  # type: ignore[no-untyped-def]
    from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod

    from adapters.vllm.quantization.linear import AscendW8A8DynamicLinearMethod
    from adapters.vllm.quantization.moe import AscendW8A8DynamicMoeMethod

    style, _, llm = served
    assert llm.llm_engine.vllm_config.model_config.quantization == "ascend"
    model = _model(llm)
    experts = {n: m for n, m in model.named_modules() if type(m).__name__ == "RoutedExperts"}
    assert experts and {type(m.quant_method) for m in experts.values()} == {
        AscendW8A8DynamicMoeMethod}
    for name, m in experts.items():
        assert m.w13_weight.dtype == m.w2_weight.dtype == torch.int8, name
        assert m.ascend_w13_scale.dtype == torch.float32, name
    linears = {n: type(m.quant_method) for n, m in model.named_modules()
               if isinstance(m, LinearBase)}
    routers = [n for n in linears if n.endswith("mlp.gate")]
    assert routers and all(linears[n] is UnquantizedLinearMethod for n in routers)
    if style == "deepseek_v3":  # shared experts are ordinary quantized linears
        shared = [n for n in linears if ".shared_experts." in n]
        assert shared and all(linears[n] is AscendW8A8DynamicLinearMethod for n in shared)


def test_batched_chunked_and_prefix_cached_ids_equal_the_fake_quant_reference(served) -> None:  # type: ignore[no-untyped-def]
    _, export, llm = served
    prompts = _prompts(2, [3, 17, 33, 48, 64, 90, 129, 200])
    expected = greedy_token_ids(export, prompts, MAX_NEW)
    first = _generate(llm, prompts)
    assert [list(o.outputs[0].token_ids) for o in first] == expected
    second = _generate(llm, prompts)
    assert [list(o.outputs[0].token_ids) for o in second] == expected
    cached = [o.num_cached_tokens for o in second]
    assert all(c >= (len(p) - 1) // BLOCK * BLOCK for c, p in zip(cached, prompts, strict=True))


def test_logprobs_follow_the_quantized_experts_not_the_float_ones(served) -> None:  # type: ignore[no-untyped-def]
    from vllm import SamplingParams, TokensPrompt

    style, export, llm = served
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
    to_quant = float((served_lp - quant_lp).abs().max())
    to_float = float((served_lp - float_lp).abs().max())
    assert to_quant < 1e-3
    assert to_float > 10 * max(to_quant, 1e-4), (to_quant, to_float)
