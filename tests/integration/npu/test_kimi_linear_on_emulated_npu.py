"""Kimi-Linear on the emulated NPU, bf16: the host's greedy ids up to bf16 near-ties.

The model: scripts/make_models.py's Kimi-Linear at size npu-mla (three KDA layers, a NoPE MLA
layer at the shapes torch_npu's MLA attention documents, sparse MoE with a shared expert).
Two fresh processes side by side (this file run as a script): the host device, eager; the NPU
platform, worker and adapters on the emulated torch_npu and device, with the graphs the plan
gives it unasked (FULL_DECODE_ONLY, vllm-ascend's MLA default). On the NPU:
- the KDA layers through the NPU linear-attention port: torch on the device (torch_npu
  2.14.0's gated-delta-rule ops take one gate per head, KDA has one per key channel);
- the NoPE MLA layer through the NPU MLA backend on the hybrid cache's block-local latent
  planes (npu_scatter_nd_update_ writes, npu_fused_infer_attention_score reads);
- the MoE through the plugin's NPU MoE method.
A batch of 8 mixed lengths with chunked prefill (64-token steps). Each request's ids equal
the host's up to its first bf16 near-tie: where they part, the host's top-2 logprob gap
there is shown and must be small. The doctor's KV + state bytes per token equal what the
NPU worker allocated. One engine per device, shared by the cases. An emulator, not Ascend
hardware.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

LENGTHS = (5, 150, 40, 200, 1, 131, 77, 263)
MAX_NEW = 8
CAPTURE_SIZES = [1, 2, 4, 8]
# A bf16 near-tie: the host's top-2 logprobs this close where the NPU's id parts from it.
NEAR_TIE = 0.1


def _run(device: str, model: str) -> None:
    """One engine in this process (the script's side): the batch, printed as JSON."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ["VLLM_ASCEND_DEVICE"] = "cpu" if device == "host" else "npu"
    sys.path.insert(0, str(Path(__file__).parent))
    from generate_run import emulate_npu, prompts

    tnpu = emulate_npu() if device == "npu" else None
    import torch
    from vllm import LLM, SamplingParams, TokensPrompt
    from vllm.compilation.counter import compilation_counter

    graphs: dict[str, Any] = (
        {"compilation_config": {"cudagraph_capture_sizes": CAPTURE_SIZES}}
        if device == "npu" else {"enforce_eager": True}
    )
    llm = LLM(
        model=model, dtype="bfloat16", max_model_len=512, max_num_batched_tokens=64,
        max_num_seqs=8, kv_cache_memory_bytes=32 << 20, seed=0, **graphs,
    )
    params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True, logprobs=2)
    batch = [TokensPrompt(prompt_token_ids=p) for p in prompts(0, LENGTHS)]
    out = llm.generate(batch, params, use_tqdm=False)
    runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
    model = runner.model.unwrap() if hasattr(runner.model, "unwrap") else runner.model
    config = llm.llm_engine.vllm_config
    tensors = [t for entry in runner.kv_caches
               for t in (entry if isinstance(entry, (list, tuple)) else [entry])
               if isinstance(t, torch.Tensor)]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    blocks = config.cache_config.num_gpu_blocks * config.cache_config.block_size
    result = {
        "ids": [list(o.outputs[0].token_ids) for o in out],
        # Each step's top-2 logprobs, best first.
        "top2": [[sorted((x.logprob for x in step.values()), reverse=True)[:2]
                  for step in o.outputs[0].logprobs] for o in out],
        "block_size": config.cache_config.block_size,
        "kv_devices": sorted({t.device.type for t in tensors}),
        "kv_bytes_per_token": sum(storages.values()) / blocks,
        "graph_mode": config.compilation_config.cudagraph_mode.name,
        "captured": compilation_counter.num_cudagraph_captured,
        "torch_npu_ops": sorted({name for name, _, _ in getattr(tnpu, "calls", [])}),
        "linear_ops": sorted({type(m.linear_ops).__name__ for m in model.modules()
                              if hasattr(m, "linear_ops")}),
        "model_class": type(model).__name__,
    }
    print("RESULT " + json.dumps(result), flush=True)


@pytest.fixture(scope="module")
def model_dir() -> str:
    from support.hf_reference import MODELS_DIR, make_models_module

    models = make_models_module()
    return str(models.make_kimi_linear(MODELS_DIR / "npu-mla-kimi_linear", size="npu-mla"))


@pytest.fixture(scope="module")
def runs(model_dir: str) -> dict[str, dict[str, Any]]:
    from support.child_runs import host_and_npu  # (this file also runs as the child)

    return host_and_npu(__file__, model_dir)


def test_npu_gives_the_host_ids_up_to_bf16_near_ties(runs) -> None:  # type: ignore[no-untyped-def]
    host, npu = runs["host"], runs["npu"]
    assert len(npu["ids"]) == len(host["ids"]) == len(LENGTHS)
    from support.child_runs import first_partings

    parted = first_partings(npu["ids"], host["ids"], host["top2"])
    print(f"requests parting from the host (request, step, host top-2 gap): {parted}")
    assert all(gap <= NEAR_TIE for _, _, gap in parted), parted
    assert len(parted) <= 2, parted  # most of the batch equal throughout


def test_kda_mla_and_moe_on_the_npu_ops_with_graphs(runs) -> None:  # type: ignore[no-untyped-def]
    host, npu = runs["host"], runs["npu"]
    assert npu["model_class"] == "AscendKimiLinearForCausalLM"
    assert npu["linear_ops"] == ["NpuLinearAttentionOps"]
    assert npu["kv_devices"] == ["npu"] and host["kv_devices"] == ["cpu"]
    # The MLA layer's latent writes and its decode (with rope inputs) and TND prefill; the
    # MoE's routing and grouped matmuls. No gated-delta-rule op: KDA's gate is per channel.
    ops = set(npu["torch_npu_ops"])
    assert {"npu_scatter_nd_update_", "npu_fused_infer_attention_score",
            "npu_grouped_matmul"} <= ops, sorted(ops)
    assert not {"npu_chunk_gated_delta_rule", "npu_recurrent_gated_delta_rule"} & ops
    assert npu["graph_mode"] == "FULL_DECODE_ONLY" and npu["captured"] > 0
    assert npu["block_size"] == host["block_size"] and npu["block_size"] % 128 == 0


def test_kv_and_state_bytes_per_token_are_what_the_doctor_plans(  # type: ignore[no-untyped-def]
    runs, model_dir: str
) -> None:
    """The core's KV bytes per token (the doctor's and the worker's budget: the MLA layer's
    latent and rope key in bf16, the KDA layers' conv and float32 recurrent states in pages
    of the same size) equal what the NPU worker allocated."""
    from ascend_core.memory_budget.sizes import kv_bytes_per_token
    from ascend_core.model_facts import model_facts_from_config

    facts = model_facts_from_config(json.loads((Path(model_dir) / "config.json").read_text()))
    planned = kv_bytes_per_token(facts, kv_dtype_bytes=2)
    assert runs["npu"]["kv_bytes_per_token"] == planned.bytes == runs["host"]["kv_bytes_per_token"]


if __name__ == "__main__":
    _run(sys.argv[1], sys.argv[2])
