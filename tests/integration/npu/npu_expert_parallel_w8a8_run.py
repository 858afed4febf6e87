"""LLM.generate of a W8A8_DYNAMIC export on emulated A3 NPUs, printed as JSON: TP=1 eager
(the reference, with each step's top-2 logprobs) or TP=2 with expert parallel
(VLLM_ASCEND_MOE_COMM_METHOD as the parent set it) in the plan's default graph mode.

npu_expert_parallel_run.py's two passes (chunked-prefill prompts, then a decode pass of
one-token prompts whose steps each replay an NPU graph), and per rank: its MoE layers'
quant method and exchange, the MC2 calls by quant mode and the dtypes that all-to-all
sent over the first pass; over the decode pass, the graph replays, the MC2 ops launched
from the host and replayed, and the dispatches by quant mode (launched or replayed).

Run as: python npu_expert_parallel_w8a8_run.py MODEL_DIR TP (in child_env with 2
emulated NPUs).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: integration, support

from integration.npu.npu_expert_parallel_run import (
    CAPTURE_SIZES,
    MAX_NEW,
    _top2,
    decode_prompts,
    exchange_calls,
    moe_methods,
    prompts,
    step_counters,
)

QUANT_KEYS = ("npu_moe_distribute_dispatch_v2 quant_mode=2",
              "npu_moe_distribute_dispatch_v2 quant_mode=0")


def watch_all_to_all(wrapper: object) -> bool:
    """Run in each worker: record the dtypes all_to_all_single sends."""
    import torch.distributed as dist

    real = dist.all_to_all_single
    sent: list[str] = []

    def counted(output: Any, inp: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(inp.dtype).removeprefix("torch."))
        return real(output, inp, *args, **kwargs)

    counted.sent = sent  # type: ignore[attr-defined]
    dist.all_to_all_single = counted
    return True


def quant_calls(wrapper: object, reset: bool) -> dict[str, Any]:
    """Run in each worker: its MoE layers' quant method, the MC2 dispatches by quant mode
    (launched or replayed) and the dtypes all-to-all sent, since the last reset."""
    import torch.distributed as dist

    from support.torch_npu_emulator import semantics_mc2

    sent: list[str] = getattr(dist.all_to_all_single, "sent", [])
    out = {
        "quant_methods": sorted({type(q).__name__ for q in moe_methods(wrapper)}),
        "dispatch_modes": {k: semantics_mc2.TRAFFIC[k] for k in QUANT_KEYS},
        "all_to_all_sent": sorted(set(sent)),
    }
    if reset:
        semantics_mc2.TRAFFIC.clear()
        sent.clear()
    return out


def main(model: str, tp: int) -> None:
    os.environ["VLLM_ASCEND_DEVICE"] = "npu"
    os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # collective_rpc of a function
    from vllm import LLM, SamplingParams, TokensPrompt

    graphs = tp > 1  # the reference runs eagerly; EP in the plan's default graph mode
    llm = LLM(
        model=model,
        dtype="bfloat16",
        enforce_eager=not graphs,
        compilation_config={"cudagraph_capture_sizes": CAPTURE_SIZES} if graphs else None,
        max_model_len=256,
        block_size=128,
        max_num_batched_tokens=64,
        max_num_seqs=8,
        kv_cache_memory_bytes=32 << 20,
        seed=0,
        tensor_parallel_size=tp,
        enable_expert_parallel=tp > 1,
    )
    params = SamplingParams(
        max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True, logprobs=2 if tp == 1 else None
    )

    def generate(batch: list[list[int]]) -> list[Any]:
        return llm.generate([TokensPrompt(prompt_token_ids=p) for p in batch], params,
                            use_tqdm=False)

    if tp > 1:
        llm.collective_rpc(watch_all_to_all)
    out = generate(prompts())
    result: dict[str, Any] = {"ids": [list(o.outputs[0].token_ids) for o in out]}
    if tp > 1:
        result["ranks"] = llm.collective_rpc(exchange_calls)
        result["quant"] = llm.collective_rpc(quant_calls, args=(True,))
        llm.collective_rpc(step_counters, args=(True,))
    decode = generate(decode_prompts())
    result["decode_ids"] = [list(o.outputs[0].token_ids) for o in decode]
    if tp == 1:
        result["top2"], result["decode_top2"] = _top2(out), _top2(decode)
    else:
        result["decode_steps"] = MAX_NEW
        result["decode_ranks"] = llm.collective_rpc(step_counters, args=(False,))
        result["decode_quant"] = llm.collective_rpc(quant_calls, args=(False,))
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
