"""One profiled LLM.generate on the emulated NPU, in a fresh process, printed as JSON.

Run as: python profile_run.py TRACE_DIR MODEL_DIR
The engine runs with --profiler-config profiler=torch under TRACE_DIR; LLM.start_profile /
stop_profile around one generate go through the plugin's worker to torch_npu's profiler
(the emulated one: support/torch_npu_emulator/profiler.py). An emulator, not hardware.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from pathlib import Path

from generate_run import emulate_npu


def main(trace_dir: str, model: str) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ["VLLM_ASCEND_DEVICE"] = "npu"
    emulate_npu()
    from vllm import LLM, SamplingParams, TokensPrompt

    llm = LLM(
        model=model,
        dtype="bfloat16",
        enforce_eager=True,
        max_model_len=256,
        block_size=128,
        max_num_batched_tokens=64,
        max_num_seqs=4,
        kv_cache_memory_bytes=16 << 20,
        seed=0,
        profiler_config={
            "profiler": "torch",
            "torch_profiler_dir": trace_dir,
            "torch_profiler_with_stack": True,
            "ignore_frontend": True,
        },
    )
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    prompts = [TokensPrompt(prompt_token_ids=[5, 6, 7, 8, 9])]
    before = llm.generate(prompts, params, use_tqdm=False)
    llm.start_profile(profile_prefix="gen")
    profiled = llm.generate(prompts, params, use_tqdm=False)
    llm.stop_profile()
    worker = llm.llm_engine.model_executor.driver_worker.worker
    session = worker.profiler.last_trace
    output = Path(session, "ASCEND_PROFILER_OUTPUT")
    with open(output / "kernel_details.csv") as f:
        kernels = [row["Name"] for row in csv.DictReader(f)]
    with open(output / "trace_view.json") as f:
        names = sorted({e.get("name", "") for e in json.load(f)})
    info = json.loads(Path(session, "profiler_info.json").read_text())
    print("RESULT " + json.dumps({
        "profiler": type(worker.profiler).__name__,
        "device_profiler": type(worker.profiler._device).__name__,
        "session": session,
        "sessions": sorted(p.name for p in Path(trace_dir).iterdir()),
        "kernels": sorted(set(kernels)),
        "kernel_launches": len(kernels),
        "trace_names": [n for n in names if n.startswith(("npu::", "aten::", "execute_"))],
        "common_config": info["config"]["common_config"],
        "ids": [list(o.outputs[0].token_ids) for o in (*before, *profiled)],
    }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
