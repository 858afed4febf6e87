"""n-gram speculation on the emulated NPU, in a fresh process, printed as JSON.

Two engines one after the other in this process (plain, then ngram with k=K), bf16,
block 128, enforce_eager, chunked prefill (max_num_batched_tokens=64 is shorter than the
long prompts), a second pass through the prefix cache, a batch of 8 mixed lengths whose
prompts repeat a short phrase (so n-gram proposals exist). Per engine: the ids of both
passes, the cached tokens, vLLM's spec-decode counters, how the fused attention op was
called, and the emulated device's counters per generated token.

Run as: python spec_run.py MODEL_DIR (under the emulator: support.torch_npu_emulator's
child_env). Other methods: python spec_run.py MODEL_DIR '{"name": SPECULATIVE_CONFIG}'
runs plain, then each named config (each but ngram and suffix also samples twice with
per-request seeds, to show seeded runs repeat); a config with a "graphs" entry (a
compilation_config) runs without enforce_eager, capturing NPU graphs. An emulator, not
Ascend hardware.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path
from typing import Any

LENGTHS = (3, 17, 33, 48, 64, 90, 129, 150)
MAX_NEW = 24
K = 3
SPEC = {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_max": 4,
        "prompt_lookup_min": 2}

_TESTS = Path(__file__).resolve().parents[2]


def prompts(seed: int = 7) -> list[list[int]]:
    """A short phrase with every token doubled, repeated: a model that repeats its last
    token t sees "t t" earlier followed by another token, so n-gram proposes that one and
    it is rejected, then proposes repeats that are accepted."""
    rng = random.Random(seed)
    out = []
    for n in LENGTHS:
        phrase = [t for t in (rng.randrange(2, 500) for _ in range(rng.randrange(2, 5)))
                  for _ in range(2)]
        out.append((phrase * (n // len(phrase) + 1))[:n])
    return out


def _counter(llm: Any, name: str) -> int:
    return int(sum(getattr(m, "value", 0) for m in llm.get_metrics() if m.name == name))


def run_engine(model: str, spec: dict[str, object] | None, torch_npu: Any,
               seeded: bool = False) -> dict[str, Any]:
    from engine_teardown import shut_down
    from vllm import SamplingParams, TokensPrompt
    from vllm.compilation.counter import compilation_counter

    from support.emulated_npu_device import counters, launches, op_counts, reset_counters, syncs
    from support.spec_engine import seeded_indices, seeded_passes, spec_llm

    spec = dict(spec) if spec is not None else None
    graphs = spec.pop("graphs", None) if spec is not None else None
    captured = compilation_counter.num_cudagraph_captured
    llm = spec_llm(model, spec, "bfloat16", 128, graphs)  # type: ignore[arg-type]
    captured = compilation_counter.num_cudagraph_captured - captured
    try:
        params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True)
        batch = [TokensPrompt(prompt_token_ids=p) for p in prompts()]
        torch_npu.calls.clear()
        reset_counters()
        passes = [llm.generate(batch, params, use_tqdm=False) for _ in range(2)]
        device = counters()
        ops = op_counts()
        compilation = llm.llm_engine.vllm_config.compilation_config
        generated = sum(len(o.outputs[0].token_ids) for out in passes for o in out)
        attention = torch_npu.calls_of("npu_fused_infer_attention_score")
        config = llm.llm_engine.vllm_config
        k = int(str((spec or {}).get("num_speculative_tokens", K)))
        return {
            "ids": [[list(o.outputs[0].token_ids) for o in out] for out in passes],
            "cached": [int(o.num_cached_tokens or 0) for o in passes[1]],
            "drafts": _counter(llm, "vllm:spec_decode_num_draft_tokens"),
            "accepted": _counter(llm, "vllm:spec_decode_num_accepted_tokens"),
            "async_scheduling": bool(config.scheduler_config.async_scheduling),
            # Calls whose longest query is 2..K+1 tokens over a longer cached context:
            # the verification of a decoding request's 1 + k tokens.
            "multi_token_decode_calls": sum(
                1 for b in attention
                if b["input_layout"] == "BSH"
                and 1 < max(b["actual_seq_lengths"] or [1]) <= k + 1
                and all(kv > q for q, kv in zip(b["actual_seq_lengths"],
                                                b["actual_seq_lengths_kv"], strict=False))
            ),
            # MLA: requests of at most 1 + K new tokens in its prefill calls (TND, whose
            # query lengths are running sums) ...
            "mla_short_prefill_queries": sum(
                1 for b in attention if b["input_layout"] == "TND"
                for lo, hi in zip([0, *b["actual_seq_lengths"]], b["actual_seq_lengths"],
                                  strict=False)
                if hi - lo <= k + 1
            ),
            # ... and its decode calls (BSND) with more rows than the batch's requests can
            # fill one each (max_num_seqs=8): rows of their own for verified tokens.
            "mla_decode_calls_over_batch": sum(
                1 for b in attention
                if b["input_layout"] == "BSND" and len(b["actual_seq_lengths_kv"]) > 8
            ),
            # Launches of the attention op from the host (not those a graph replay runs).
            "attention_launches": sum(v for k, v in ops.items() if "fused_infer_attention" in k),
            "graph_mode": str(compilation.cudagraph_mode.name),
            "capture_sizes": list(compilation.cudagraph_capture_sizes),
            "captured": captured,
            "graph_replays": device["graph_replays"],
            "graph_captures": device["graph_captures"],
            "generated": generated,
            "launches_per_token": launches(device) / generated,
            "syncs_per_token": syncs(device) / generated,
            "d2h_copies": device["d2h_copies"],
            "scalar_reads": device["scalar_reads"],
            "seeded": seeded_passes(llm, prompts(), MAX_NEW) if seeded else None,
            "seeded_indices": seeded_indices(prompts()),
        }
    finally:
        shut_down(llm)


def main(model: str, specs: dict[str, dict[str, object]]) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process
    os.environ["VLLM_ASCEND_DEVICE"] = "npu"
    sys.path.insert(0, str(_TESTS))
    sys.path.insert(0, str(_TESTS / "integration" / "vllm"))
    from support.torch_npu_emulator.activate import activate

    torch_npu = activate()
    result = {"plain": run_engine(model, None, torch_npu)}
    for name, spec in specs.items():
        seeded = name not in ("ngram", "suffix") and "graphs" not in spec
        result[name] = run_engine(model, spec, torch_npu, seeded=seeded)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {"ngram": SPEC})
