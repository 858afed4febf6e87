"""compressed-tensors int8 W8A8 checkpoints written by llm-compressor itself
(scripts/make_ct_exports.py, in its own venv) served through vLLM's own compressed-tensors
config, with the plugin's kernel chosen by vLLM's ScaledMM kernel selection; greedy ids in
fp32 equal the fake-quant reference's (support.quant_reference), batched, chunked and
prefix-cached. Dynamic per-token and static per-tensor activations, per-channel weights.

FP8 (issue 45): llm-compressor's FP8_DYNAMIC (a scale per output channel) and FP8_BLOCK
([64, 64] blocks: the tiny model's k/v projections are 64 wide), and the same block
weights in the HF `fp8` format of the official releases (weight_scale_inv,
weight_block_size; written by hand by the export script), served by the plugin's
dequantize-at-load kernel: ids equal those of the float model with the files' weights
dequantized (support.quant_reference.fp8_greedy_token_ids). vLLM's `fp8` method takes
bf16/fp16 only, so the HF-format case runs in bf16: its weights equal the files'
dequantized ones cast once, and its ids are the bf16 reference's up to near-ties (a
teacher-forced gap under 0.25 nats, the emulated NPU's bf16 tolerance).
"""

from __future__ import annotations

import random

import pytest
import torch
from engine_teardown import shut_down

from support.quant_reference import (
    ct_greedy_token_ids,
    fp8_gaps,
    fp8_greedy_token_ids,
    local_ct_export,
)

MAX_NEW = 12
BLOCK = 16


FP8 = ("fp8_dynamic", "fp8_block", "fp8_block_hf")


@pytest.fixture(scope="module", params=["dynamic", "static", *FP8])
def served(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    from vllm import LLM

    fp8 = request.param in FP8
    export = str(local_ct_export("llama", "dynamic" if fp8 else request.param,
                                 scheme=request.param if fp8 else "int8"))
    dtype = "bfloat16" if request.param == "fp8_block_hf" else "float32"
    llm = LLM(model=export, dtype=dtype, enforce_eager=True, max_model_len=512,
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
    method = "fp8" if scheme == "fp8_block_hf" else "compressed-tensors"
    assert config.model_config.quantization == method
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
    scale = files.get(f"{name}.weight_scale_inv", files.get(f"{name}.weight_scale"))
    block = None if scheme == "fp8_dynamic" else (64, 64)
    o_proj = model.model.layers[1].self_attn.o_proj
    dtype = torch.bfloat16 if scheme == "fp8_block_hf" else torch.float32
    assert o_proj.weight.dtype == dtype
    expected = fp8_weight(files[f"{name}.weight"], scale, block).to(dtype)
    assert torch.equal(o_proj.weight.data, expected)


def test_ids_equal_the_fake_quant_reference(served) -> None:  # type: ignore[no-untyped-def]
    from vllm import SamplingParams, TokensPrompt

    scheme, export, llm = served
    rng = random.Random(5)
    prompts = [[rng.randrange(2, 500) for _ in range(n)] for n in (3, 17, 48, 90, 129, 200)]
    params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True)
    if scheme == "fp8_block_hf":  # bf16 (vLLM's fp8 method takes no float32)
        for _ in range(2):
            outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params,
                                use_tqdm=False)
            got = [list(o.outputs[0].token_ids) for o in outs]
            assert fp8_gaps(export, prompts, got, torch.bfloat16) < 0.25
        assert sum(o.num_cached_tokens for o in outs) > 0
        return
    reference = fp8_greedy_token_ids if scheme in FP8 else ct_greedy_token_ids
    expected = reference(export, prompts, MAX_NEW)
    for _ in range(2):  # the second pass hits the prefix cache
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params,
                            use_tqdm=False)
        assert [list(o.outputs[0].token_ids) for o in outs] == expected
    assert sum(o.num_cached_tokens for o in outs) > 0
