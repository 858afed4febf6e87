"""LLM.generate on emulated A3 NPUs, printed as JSON: TP=1 eager (the reference, with each
step's top-2 logprobs) or TP=2 with expert parallel (VLLM_ASCEND_MOE_COMM_METHOD as the
parent set it) in the plan's default graph mode, with each rank's MC2 and all-to-all calls.

Two passes: the prompts of PROMPT_LENGTHS (chunked prefill, mixed steps), then a decode
pass (DECODE_PROMPTS one-token prompts: every step a uniform decode step, each one NPU
graph replay in the graph runs) around which each rank's emulator counters are read: the
graph replays, the MC2 ops those replays ran, the ones launched from the host, and the
reads back to the host. With `misroute`, a third generate (the first pass's prompts)
follows with every MoE layer's exchange behind unit.fakes.moe_comm (each token sent to
the wrong rank), its ids as `misrouted_ids`.

Run as: python npu_expert_parallel_run.py MODEL_DIR TP [misroute] (in child_env with 2
emulated NPUs).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

PROMPT_LENGTHS = (5, 40, 90, 17)  # 90 > max_num_batched_tokens: chunked prefill
MAX_NEW = 8
DECODE_PROMPTS = 4  # one token each: a decode batch of 4 from the first step
CAPTURE_SIZES = [4, 8]  # few sizes: each is captured whole and in pieces
MC2_OPS = ("npu_moe_distribute_dispatch_v2", "npu_moe_distribute_combine_v2")


def prompts() -> list[list[int]]:
    import random

    rng = random.Random(1)
    return [[rng.randrange(2, 500) for _ in range(n)] for n in PROMPT_LENGTHS]


def moe_methods(wrapper: object) -> list[Any]:
    """The quant methods of a worker's MoE layers (RoutedExperts)."""
    worker = getattr(wrapper, "worker", wrapper)
    return [
        m.quant_method for m in worker.model_runner.model.modules()  # type: ignore[attr-defined]
        if type(m).__name__ == "RoutedExperts"
    ]


def decode_prompts() -> list[list[int]]:
    return [[7 + 11 * i] for i in range(DECODE_PROMPTS)]


def exchange_calls(wrapper: object) -> dict[str, Any]:
    """Run in each worker: its MoE layers' exchange and the emulated MC2 calls it made."""
    from adapters.vllm.layers.fused_moe import AscendMoeMethod
    from support.torch_npu_emulator.activate import activate_from_env

    methods = moe_methods(wrapper)
    tnpu = activate_from_env()
    return {
        "exchanges": [
            isinstance(q, AscendMoeMethod) and q.exchange is not None for q in methods
        ],
        "methods": sorted({q.exchange.method_for(1) for q in methods if q.exchange}),
        # The plan's methods (small steps', then larger ones'), from the core's decision.
        "plan_methods": sorted({
            m.value for q in methods if q.exchange for m in q.exchange.decision.comm.methods()
        }),
        "dispatch": len(tnpu.calls_of("npu_moe_distribute_dispatch_v2")),
        "combine": len(tnpu.calls_of("npu_moe_distribute_combine_v2")),
        "init_routing": len(tnpu.calls_of("npu_moe_init_routing_v2")),
    }


def misroute(wrapper: object) -> int:
    """Run in each worker: every MoE layer's exchange sends tokens to the wrong rank."""
    from unit.fakes.moe_comm import MisroutedMoeComm

    exchanges = [q.exchange for q in moe_methods(wrapper) if q.exchange is not None]
    for exchange in exchanges:
        exchange.comm = MisroutedMoeComm(exchange.comm)
    return len(exchanges)


def step_counters(wrapper: object, reset: bool) -> dict[str, Any]:
    """Run in each worker: its emulator's counters since the last reset (then reset when
    asked): graph replays, host reads, the MC2 ops launched from the host and replayed."""
    from support.emulated_npu_device import counters, reset_counters, syncs
    from support.torch_npu_emulator import graphs
    from support.torch_npu_emulator.activate import activate_from_env

    tnpu = activate_from_env()
    c = counters()
    out: dict[str, Any] = {
        "graph_replays": c["graph_replays"],
        "syncs": syncs(c),
        "launched": {op: len(tnpu.calls_of(op)) for op in MC2_OPS},
        "replayed": {op: graphs.REPLAYED[op] for op in MC2_OPS},
    }
    if reset:
        reset_counters()
        tnpu.calls.clear()
        graphs.REPLAYED.clear()
    return out


def _top2(out: list[Any]) -> list[list[list[float]]]:
    """Each step's top-2 logprobs: the gap says how near a tie the step was."""
    return [
        [sorted((lp.logprob for lp in step.values()), reverse=True)[:2]
         for step in o.outputs[0].logprobs or []]
        for o in out
    ]


def main(model: str, tp: int, wrong_rank: bool = False) -> None:
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

    out = generate(prompts())
    result: dict[str, Any] = {"ids": [list(o.outputs[0].token_ids) for o in out]}
    if tp > 1:
        result["ranks"] = llm.collective_rpc(exchange_calls)
        llm.collective_rpc(step_counters, args=(True,))
    decode = generate(decode_prompts())
    result["decode_ids"] = [list(o.outputs[0].token_ids) for o in decode]
    if tp == 1:
        result["top2"], result["decode_top2"] = _top2(out), _top2(decode)
    else:
        result["decode_steps"] = MAX_NEW
        result["decode_ranks"] = llm.collective_rpc(step_counters, args=(False,))
    if wrong_rank:
        result["misrouted_layers"] = llm.collective_rpc(misroute)
        wrong = generate(prompts())
        result["misrouted_ids"] = [list(o.outputs[0].token_ids) for o in wrong]
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3:] == ["misroute"])
