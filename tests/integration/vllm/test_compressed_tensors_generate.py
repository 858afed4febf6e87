"""compressed-tensors int8 W8A8 checkpoints written by llm-compressor itself
(scripts/make_ct_exports.py, in its own venv) served through vLLM's own compressed-tensors
config, with the plugin's kernel chosen by vLLM's ScaledMM kernel selection; greedy ids in
fp32 equal the fake-quant reference's (support.quant_reference), batched, chunked and
prefix-cached. Dynamic per-token and static per-tensor activations, per-channel weights.

FP8 (issue 45): llm-compressor's FP8_BLOCK ([64, 64] blocks: the tiny model's k/v
projections are 64 wide), served by the plugin's dequantize-at-load kernel: ids equal
those of the float model with the files' weights dequantized
(support.quant_reference.fp8_greedy_token_ids). The kernel's other inputs run in
tests/integration/npu/test_fp8_w4a8_on_emulated_npu.py's host processes: FP8_DYNAMIC (a
scale per output channel: the tiny Qwen3-MoE's attention, float32, the reference's ids)
and the HF `fp8` format of the official releases (weight_scale_inv, weight_block_size:
its attention and experts, bf16, up to near-ties).
"""

from __future__ import annotations

import random

import pytest
import torch
from engine_teardown import shut_down

from support.quant_reference import (
    ct_greedy_token_ids,
    fp8_greedy_token_ids,
    local_ct_export,
)

MAX_NEW = 12
BLOCK = 16


FP8 = ("fp8_block",)


@pytest.fixture(scope="module", params=["dynamic", "static", *FP8])
def served(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    from vllm import LLM

    fp8 = request.param in FP8
    export = str(local_ct_export("llama", "dynamic" if fp8 else request.param,
                                 scheme=request.param if fp8 else "int8"))
    llm = LLM(model=export, dtype="float32", enforce_eager=True, max_model_len=512,
              block_size=BLOCK, max_num_batched_tokens=64, max_num_seqs=8,
              kv_cache_memory_bytes=32 << 20, enable_prefix_caching=True, seed=0)
    yield request.param, export, llm
    shut_down(llm)


def test_vllms_compressed_tensors_config_runs_our_kernel(served) -> None:  # type: ignore[no-untyped-def]
    from vllm.model_executor.layers.linear import LinearBase

    from adapters.container import container
    from adapters.vllm.quantization.scaled_mm import AscendInt8ScaledMMLinearKernel
    from ascend_core.deployment_builder import files_say
    from ascend_core.quantization import QuantMethod

    activations, export, llm = served
    if activations in FP8:
        pytest.skip("int8 layers only (the fp8 kernel: test_fp8_layers_hold_dequantized_weights)")
    config = llm.llm_engine.vllm_config
    assert config.model_config.quantization == "compressed-tensors"
    # The core reads the method from config.json's quantization_config.quant_method.
    assert files_say(container().model_files(export)) is QuantMethod.COMPRESSED_TENSORS
    model = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
    kernels = {type(m.scheme.kernel) for m in model.modules()
               if isinstance(m, LinearBase) and getattr(m, "scheme", None) is not None}
    assert kernels == {AscendInt8ScaledMMLinearKernel}
    qkv = model.model.layers[0].self_attn.qkv_proj
    assert qkv.weight.dtype == torch.int8
    assert qkv.scheme.is_static_input_scheme == (activations == "static")


def test_fp8_layers_hold_dequantized_weights(served) -> None:  # type: ignore[no-untyped-def]
    from vllm.model_executor.layers.linear import LinearBase

    from adapters.vllm.quantization.fp8 import AscendFp8DequantLinearKernel
    from support.quant_reference import fp8_weight

    scheme, export, llm = served
    if scheme not in FP8:
        pytest.skip("fp8 exports only")
    config = llm.llm_engine.vllm_config
    assert config.model_config.quantization == "compressed-tensors"
    model = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
    linears = [m for m in model.modules() if isinstance(m, LinearBase)]
    method_of = [getattr(m, "scheme", m.quant_method) for m in linears]
    kernels = {type(getattr(q, "fp8_linear", None)) for q in method_of}
    assert kernels == {AscendFp8DequantLinearKernel}
    # o_proj (not fused): its weight is the file's, dequantized once, in float32.
    from pathlib import Path

    from safetensors.torch import load_file

    files = load_file(str(next(Path(export).glob("*.safetensors"))))
    name = "model.layers.1.self_attn.o_proj"
    scale = files[f"{name}.weight_scale"]
    o_proj = model.model.layers[1].self_attn.o_proj
    assert o_proj.weight.dtype == torch.float32
    expected = fp8_weight(files[f"{name}.weight"], scale, (64, 64)).to(torch.float32)
    assert torch.equal(o_proj.weight.data, expected)


def test_ids_equal_the_fake_quant_reference(served) -> None:  # type: ignore[no-untyped-def]
    from vllm import SamplingParams, TokensPrompt

    scheme, export, llm = served
    rng = random.Random(5)
    prompts = [[rng.randrange(2, 500) for _ in range(n)] for n in (3, 17, 48, 90, 129, 200)]
    params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True)
    reference = fp8_greedy_token_ids if scheme in FP8 else ct_greedy_token_ids
    expected = reference(export, prompts, MAX_NEW)
    for _ in range(2):  # the second pass hits the prefix cache
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params,
                            use_tqdm=False)
        assert [list(o.outputs[0].token_ids) for o in outs] == expected
    assert sum(o.num_cached_tokens for o in outs) > 0
