"""One small LLM.generate run in a fresh process, printed as JSON: greedy ids and seeded
top-k/top-p ids, and (on the NPU) how many times each Triton kernel role launched.

Run as: python triton_path_run.py {host,npu} MODEL_DIR. A slimmer run than
generate_run.py (fewer prompts, one pass): on the Triton path the kernels run in Triton's
interpreter, which is slow on a shared machine. An emulator, not Ascend hardware.
"""

from __future__ import annotations

import json
import os
import sys

from generate_run import emulate_npu, prompts

LENGTHS = (5, 150, 40, 1)  # 150 > max_num_batched_tokens: a chunked prefill
MAX_NEW = 6


def main(device: str, model: str) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process
    os.environ["VLLM_ASCEND_DEVICE"] = "cpu" if device == "host" else "npu"
    if device == "npu":
        emulate_npu()
    from vllm import LLM, SamplingParams, TokensPrompt
    from vllm.platforms import current_platform

    llm = LLM(
        model=model,
        dtype="bfloat16",
        enforce_eager=True,
        max_model_len=512,
        block_size=128,
        max_num_batched_tokens=64,
        max_num_seqs=8,
        kv_cache_memory_bytes=32 << 20,
        seed=0,
    )
    batch = [TokensPrompt(prompt_token_ids=p) for p in prompts(0, LENGTHS)]
    greedy = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True)
    runs = [list(o.outputs[0].token_ids) for o in llm.generate(batch, greedy, use_tqdm=False)]
    # Prompts that fit one step: seeded generators, as generate_run.py's sampled run.
    sampling = SamplingParams(max_tokens=4, temperature=0.8, top_k=20, top_p=0.9, seed=7)
    short = [batch[0], batch[2], batch[3]]
    sampled = [list(o.outputs[0].token_ids) for o in llm.generate(short, sampling, use_tqdm=False)]
    launches: dict[str, int] = {}
    kernel_path = ""
    if device == "npu":
        from adapters.container import container

        kernels = container().npu_device.triton_kernels()
        launches, kernel_path = dict(kernels.launches), kernels.decision.describe()
    print(
        "RESULT "
        + json.dumps(
            {
                "platform": type(current_platform).__name__,
                "device_type": current_platform.device_type,
                "runs": runs,
                "sampled": sampled,
                "launches": launches,
                "kernel_path": kernel_path,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
