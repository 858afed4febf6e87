"""One LLM.generate run through the plugin, in a fresh process, printed as JSON.

`host`: the host device (adapters.cpu). `npu`: the NPU platform, worker and adapter
(NpuOps, NpuRuntime) on the emulated torch_npu, wired into the container of this process
and of every Python process vLLM starts (support.torch_npu_emulator.activate); tensors
stay in host memory. An emulator, not Ascend hardware.

Run as: python generate_run.py {host,npu} MODEL_DIR [DTYPE (bfloat16)]
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

LENGTHS = (5, 150, 40, 200, 1, 131)  # 150, 200, 131 > max_num_batched_tokens: chunked
MAX_NEW = 8

_TESTS = Path(__file__).resolve().parents[2]


def emulate_npu() -> object:
    """Wire the container for the NPU path on the emulator; returns the emulated module.

    The test started this process with `child_env`, so the sitecustomize has already
    done it (as in every Python process vLLM starts from here); this returns the module.
    """
    sys.path.insert(0, str(_TESTS))
    from support.torch_npu_emulator.activate import activate

    return activate()


def stand_in_for_triton_ascend() -> None:
    """On an NPU host triton-ascend compiles vLLM's Triton kernels and the runtime has an
    accelerator cache; this host has neither, so the host device's two patches apply."""
    from adapters.vllm.patches import apply_one
    from ascend_core.patches import REGISTRY

    for patch_id in ("host-slot-mapping-kernel", "host-shutdown-accelerator-cache"):
        spec = REGISTRY.get(patch_id)
        assert spec is not None, patch_id
        apply_one(spec)


def prompts() -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(2, 500) for _ in range(n)] for n in LENGTHS]


def main(device: str, model: str, dtype: str = "bfloat16") -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process
    os.environ["VLLM_ASCEND_DEVICE"] = "cpu" if device == "host" else "npu"
    torch_npu = emulate_npu() if device == "npu" else None
    from vllm import LLM, SamplingParams, TokensPrompt
    from vllm.platforms import current_platform

    if torch_npu is not None:
        stand_in_for_triton_ascend()
    llm = LLM(
        model=model,
        dtype=dtype,  # the NPU attention op takes fp16/bf16 queries only
        enforce_eager=True,
        max_model_len=512,
        block_size=128,  # the NPU op's paged prefill needs a multiple of 128
        max_num_batched_tokens=64,
        max_num_seqs=8,
        kv_cache_memory_bytes=32 << 20,
        enable_prefix_caching=True,
        seed=0,
    )
    params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True)
    batch = [TokensPrompt(prompt_token_ids=p) for p in prompts()]
    outputs = [llm.generate(batch, params, use_tqdm=False) for _ in range(2)]
    runs = [[list(o.outputs[0].token_ids) for o in run] for run in outputs]
    # The second pass finds the prompts' full blocks in the prefix cache.
    cached = [int(o.num_cached_tokens or 0) for o in outputs[1]]
    worker = llm.llm_engine.model_executor.driver_worker.worker
    result = {
        "platform": type(current_platform).__name__,
        "device_type": current_platform.device_type,
        "worker": type(worker).__name__,
        "ops": type(worker.model_runner.model.model.layers[0].input_layernorm.device_ops).__name__,
        "runs": runs,
        "quant_methods": sorted(
            {type(m.quant_method).__name__ for m in worker.model_runner.model.modules()
             if hasattr(m, "quant_method") and m.quant_method is not None}
        ),
        "quantization": llm.llm_engine.vllm_config.model_config.quantization,
        "cached_tokens": cached,
        "calls": sorted({name for name, _, _ in torch_npu.calls}) if torch_npu else [],
        # How the attention op was called: (input_layout, with rope inputs, sparse_mode).
        "attention_calls": sorted(
            {
                (b["input_layout"], b["query_rope"] is not None, b["sparse_mode"])
                for b in torch_npu.calls_of("npu_fused_infer_attention_score")
            }
        )
        if torch_npu
        else [],
        "sparse_modes": sorted(
            {b["sparse_mode"] for b in torch_npu.calls_of("npu_fused_infer_attention_score")}
        )
        if torch_npu
        else [],
    }
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
