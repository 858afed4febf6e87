"""LLM.generate with vLLM's EPLB on emulated A3 NPUs (or the host), printed as JSON.

`ref`: TP=1 eager, the reference, with each step's top-2 logprobs. `eplb`: TP=2 + expert
parallel + --enable-eplb with REDUNDANT redundant experts and a rebalance every
STEP_INTERVAL steps over a WINDOW-step load window, in the plan's default graph mode. The
eplb run reads each rank's EPLB state (physical -> logical map, load window) and a
fingerprint of every local physical expert's weights after start-up, then generates the
prompts twice (each pass takes more engine steps than STEP_INTERVAL, so a rebalance comes
within the first pass and another before the second), reading the state again after each.

W8A8_DYNAMIC experts: the fingerprint adds each slot's scales as the experts' math reads
them (`ascend_w13_scale` / `ascend_w2_scale`) and whether those are still views of the
scale parameters vLLM's rearrange moves. `eplb-top2` is `eplb` with each step's top-2
logprobs (a reference run).

On the emulated NPU a decode pass follows (npu_expert_parallel_run's one-token prompts:
every step a uniform decode step, each an NPU graph replay in the eplb runs; more steps
than STEP_INTERVAL, so a rebalance comes inside it). The eplb runs read each rank's
exchange (the plan's methods, VLLM_ASCEND_MOE_COMM_METHOD as the parent set it, and the
MC2 and all-to-all calls of the two passes) before it and the emulator's counters around
it (graph replays, the MC2 ops they ran and those launched from the host, host reads),
then the EPLB state again, with the rebalances since start-up and the host reads they
made (watch_rebalances), which the test tells from the steps' own.

`vllm serve`'s workers read the same views through EplbViews (a --worker-extension-cls:
the server's collective_rpc endpoint takes method names only), and both test modules
check them with weights_follow_the_map.

Run as: python npu_eplb_run.py MODEL_DIR ref|eplb|eplb-top2 [cpu|cpu-bf16] (in child_env
with 2 emulated NPUs; `cpu` serves on the host instead, in float32, `cpu-bf16` in bf16).
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

PROMPT_LENGTHS = (5, 40, 90, 17)  # 90 > max_num_batched_tokens: chunked prefill
MAX_NEW = 8
REDUNDANT = 2
WINDOW = 4
STEP_INTERVAL = 6
CAPTURE_SIZES = [4, 8]


def prompts() -> list[list[int]]:
    import random

    rng = random.Random(1)
    return [[rng.randrange(2, 500) for _ in range(n)] for n in PROMPT_LENGTHS]


def _runner_and_state(wrapper: object) -> tuple[Any, Any]:
    """A worker's model runner and its vLLM EplbState."""
    worker = getattr(wrapper, "worker", wrapper)
    runner = worker.model_runner  # type: ignore[attr-defined]
    state = getattr(runner, "eplb_state", None)
    if state is None:  # the V2 runner keeps it in its EPLB controller
        state = runner.eplb.state
    return runner, state


def watch_rebalances(wrapper: object) -> None:
    """Run in each worker (emulated NPU): each EPLB rearrange from here on is counted on
    the EplbState (`rebalances`) with the host reads it makes (`rebalance_syncs`), so a
    counted pass tells the rebalance's reads from its steps'."""
    from support.emulated_npu_device import counters, syncs

    _, state = _runner_and_state(wrapper)
    rearrange = state.rearrange
    state.rebalances, state.rebalance_syncs = 0, 0

    def counted(*args: Any, **kwargs: Any) -> Any:
        before = syncs(counters())
        try:
            return rearrange(*args, **kwargs)
        finally:
            state.rebalances += 1
            state.rebalance_syncs += syncs(counters()) - before

    state.rearrange = counted


def eplb_view(wrapper: object) -> dict[str, Any]:
    """Run in each worker: its EPLB state and its local physical experts' weights."""
    runner, state = _runner_and_state(wrapper)
    model_state = next(iter(state.model_states.values()))
    layers = [m for m in runner.model.modules() if type(m).__name__ == "RoutedExperts"]
    return {
        "physical_to_logical": model_state.physical_to_logical_map.cpu().tolist(),
        "load_window_sum": int(model_state.expert_load_window.sum().item()),
        "rearrange_step": state.expert_rearrangement_step,
        "rebalances": getattr(state, "rebalances", None),  # watch_rebalances' counts
        "rebalance_syncs": getattr(state, "rebalance_syncs", None),
        # Per layer, per local physical slot: the sum of its w13 and w2 in float64.
        "weights": [
            [float(layer.w13_weight[slot].double().sum() + layer.w2_weight[slot].double().sum())
             for slot in range(layer.local_num_experts)]
            for layer in layers
        ],
        "scales": [
            [float(layer.ascend_w13_scale[slot].double().sum()
                   + layer.ascend_w2_scale[slot].double().sum())
             for slot in range(layer.local_num_experts)]
            for layer in layers if hasattr(layer, "ascend_w13_scale")
        ],
        "scale_views": [
            layer.ascend_w13_scale.data_ptr() == layer.w13_weight_scale.data_ptr()
            and layer.ascend_w2_scale.data_ptr() == layer.w2_weight_scale.data_ptr()
            for layer in layers if hasattr(layer, "ascend_w13_scale")
        ],
        "weight_dtypes": sorted({str(layer.w13_weight.dtype).removeprefix("torch.")
                                 for layer in layers}),
        "quant_methods": sorted({type(layer.quant_method).__name__ for layer in layers}),
        "local_experts": [layer.local_num_experts for layer in layers],
        "eplb_layers": sum(getattr(layer.quant_method, "eplb", None) is not None
                           for layer in layers),
        "exchanges": [getattr(layer.quant_method, "exchange", None) is not None
                      for layer in layers],
    }


class EplbViews:
    """A worker extension for `vllm serve --worker-extension-cls`: its collective_rpc
    endpoint calls a worker method by name, with string arguments, and under data
    parallel returns the first engine's answer only; so each worker writes its view."""

    def write_eplb_view(self, directory: str) -> str:
        """Writes eplb_view as DIRECTORY/rank-N.json, N this worker's EP rank; its path."""
        from vllm.distributed import get_ep_group

        path = Path(directory) / f"rank-{get_ep_group().rank_in_group}.json"
        path.write_text(json.dumps(eplb_view(self)))
        return str(path)


def weights_follow_the_map(start: list[dict[str, Any]], state: list[dict[str, Any]],
                           when: str, key: str = "weights") -> int:
    """Each physical slot holds the weights of the logical expert the map names: the
    fingerprints of the start-up placement (`start`, every rank's eplb_view), looked up
    through the map of `state`. Returns how many slots hold another logical expert than
    at start-up."""
    layers, moved = len(start[0][key]), 0
    assert layers == 2, start[0][key]
    per_rank = len(start[0][key][0])
    for layer in range(layers):
        logical_print: dict[int, float] = {}
        for rank, view in enumerate(start):
            for slot, value in enumerate(view[key][layer]):
                logical_print[view["physical_to_logical"][layer][rank * per_rank + slot]] = value
        for rank, view in enumerate(state):
            for slot, value in enumerate(view[key][layer]):
                physical = rank * per_rank + slot
                logical = view["physical_to_logical"][layer][physical]
                assert math.isclose(value, logical_print[logical], rel_tol=1e-6), (
                    when, layer, rank, slot, logical, value, logical_print[logical])
                moved += logical != start[rank]["physical_to_logical"][layer][physical]
    return moved


def _top2(out: list[Any]) -> list[list[list[float]]]:
    return [
        [sorted((lp.logprob for lp in step.values()), reverse=True)[:2]
         for step in o.outputs[0].logprobs or []]
        for o in out
    ]


def main(model: str, mode: str, device: str, dtype: str) -> None:
    os.environ["VLLM_ASCEND_DEVICE"] = device
    os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # collective_rpc of a function
    from vllm import LLM, SamplingParams, TokensPrompt

    eplb = mode.startswith("eplb")
    top2 = mode in ("ref", "eplb-top2")
    graphs = eplb and device == "npu"
    extra: dict[str, Any] = {}
    if eplb:
        extra = {
            "tensor_parallel_size": 2,
            "enable_expert_parallel": True,
            "enable_eplb": True,
            "eplb_config": {"num_redundant_experts": REDUNDANT, "window_size": WINDOW,
                            "step_interval": STEP_INTERVAL},
        }
    llm = LLM(
        model=model,
        dtype=dtype,
        enforce_eager=not graphs,
        compilation_config={"cudagraph_capture_sizes": CAPTURE_SIZES} if graphs else None,
        max_model_len=256,
        block_size=16 if dtype == "float32" else 128,
        max_num_batched_tokens=64,
        max_num_seqs=8,
        kv_cache_memory_bytes=32 << 20,
        seed=0,
        **extra,
    )
    params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True,
                            logprobs=2 if top2 else None)

    def generate(batch: list[list[int]] | None = None) -> list[Any]:
        return llm.generate(
            [TokensPrompt(prompt_token_ids=p) for p in batch or prompts()], params,
            use_tqdm=False)

    result: dict[str, Any] = {"prompts": prompts()}
    if eplb and device == "npu":
        llm.collective_rpc(watch_rebalances)
    if eplb:
        result["start"] = llm.collective_rpc(eplb_view)
    first = generate()
    result["ids"] = [list(o.outputs[0].token_ids) for o in first]
    if eplb:
        result["after_first"] = llm.collective_rpc(eplb_view)
        second = generate()
        result["ids_after_rebalance"] = [list(o.outputs[0].token_ids) for o in second]
        result["after_second"] = llm.collective_rpc(eplb_view)
        if top2:
            result["top2_after_rebalance"] = _top2(second)
    if top2:
        result["top2"] = _top2(first)
    if device == "npu":
        result.update(_decode_pass(llm, generate, eplb, top2))
    print("RESULT " + json.dumps(result), flush=True)


def _decode_pass(llm: Any, generate: Any, eplb: bool, top2: bool) -> dict[str, Any]:
    """The decode prompts' ids (and top-2 logprobs); in the eplb runs each rank's exchange
    before, the emulator's counters around the pass and the EPLB state after."""
    from integration.npu.npu_expert_parallel_run import (
        decode_prompts,
        exchange_calls,
        step_counters,
    )

    result: dict[str, Any] = {"decode_prompts": decode_prompts()}
    if eplb:
        result["ranks"] = llm.collective_rpc(exchange_calls)
        llm.collective_rpc(step_counters, args=(True,))
    decode = generate(decode_prompts())
    result["decode_ids"] = [list(o.outputs[0].token_ids) for o in decode]
    if eplb:
        result["decode_steps"] = MAX_NEW
        result["decode_ranks"] = llm.collective_rpc(step_counters, args=(False,))
        result["after_decode"] = llm.collective_rpc(eplb_view)
    if top2:
        result["decode_top2"] = _top2(decode)
    return result


if __name__ == "__main__":
    where = sys.argv[3] if sys.argv[3:] else "npu"
    main(sys.argv[1], sys.argv[2], "npu" if where == "npu" else "cpu",
         "float32" if where == "cpu" else "bfloat16")
