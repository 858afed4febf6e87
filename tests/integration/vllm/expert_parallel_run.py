"""One LLM.generate with tensor parallel 2 and expert parallel on the host, printed as JSON.

Run as: python expert_parallel_run.py MODEL_DIR (a fresh process: the two workers and
their gloo group belong to this run alone).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

PROMPT_LENGTHS = (5, 70, 200, 33)  # 200 > max_num_batched_tokens: chunked prefill
MAX_NEW = 12


def prompts() -> list[list[int]]:
    import random

    rng = random.Random(1)
    return [[rng.randrange(2, 500) for _ in range(n)] for n in PROMPT_LENGTHS]


def expert_placement(worker: Any) -> list[dict[str, Any]]:
    """Each MoE layer's local expert count and global -> local map on this rank."""
    from adapters.vllm.layers.fused_moe import AscendMoeMethod

    return [
        {
            "local": m.local_num_experts,
            "map": m.expert_map.tolist() if m.expert_map is not None else None,
            "ours": isinstance(m.quant_method, AscendMoeMethod),
        }
        for m in worker.model_runner.model.modules()
        if type(m).__name__ == "RoutedExperts"
    ]


def main(model: str) -> None:
    os.environ["VLLM_ASCEND_DEVICE"] = "cpu"
    # collective_rpc sends expert_placement (a function) to the workers by pickle.
    os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    from vllm import LLM, SamplingParams, TokensPrompt

    llm = LLM(
        model=model,
        dtype="float32",
        enforce_eager=True,
        max_model_len=512,
        block_size=16,
        max_num_batched_tokens=64,
        max_num_seqs=8,
        kv_cache_memory_bytes=32 << 20,
        enable_prefix_caching=True,
        seed=0,
        tensor_parallel_size=2,
        enable_expert_parallel=True,
    )
    params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True)
    out = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts()], params,
                       use_tqdm=False)
    result = {
        "ids": [list(o.outputs[0].token_ids) for o in out],
        "placement": llm.collective_rpc(expert_placement),
    }
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
