"""compressed-tensors W4A16 written by llm-compressor itself, served through vLLM's own
compressed-tensors config, each run an engine in a fresh process (generate_run.py: a batch
of 8 mixed lengths, 64-token steps so long prompts prefill in chunks, then the same batch
again, hitting the prefix cache). Two exports:

- dense (scripts/make_ct_exports.py --scheme w4a16, the tiny Llama): the attention
  projections symmetric with groups of 32, the MLP with zero points and groups of 64;
  lm_head float; the plugin's AscendW4A16LinearKernel;
- moe (--scheme w4a16_moe, the tiny Qwen3-MoE): the attention symmetric g32, layer 0's
  experts symmetric g32, layer 1's experts with zero points and one scale per output
  channel; router and lm_head float; the experts through AscendW4A16MoeMethod (patch
  ct-wna16-moe-int4).

- host, float32 (both exports in one process): the greedy ids equal the fake-quant
  reference's, computed from the files alone (support.quant_reference: int4 fields
  unpacked, (q - z) * s in float32), both passes;
- emulated NPU, bfloat16 (dense: npu_convert_weight_to_int4pack, npu_weight_quant_batchmatmul,
  eager; moe: also npu_grouped_matmul's antiquant mode for the experts, in the plan's graph
  mode; the ops golden-tested against the host twins in tests/unit/npu/
  test_npu_golden_w4a16.py and test_npu_golden_w4a16_moe.py): the host bf16 run's ids, up
  to bf16 near-ties: where a continuation parts from the host's, the two tokens are within
  NEAR_TIE_NATS of each other under the float32 reference at that position (its top-2 gap
  there), and the rest of the continuation is not compared (measured, both exports: none
  parts, 16 of 16 continuations equal the host's over both passes). An emulator, not Ascend
  hardware. The module takes ~140 s (four engine processes side by side).
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
from generate_run import MAX_NEW, prompts
from test_generate_on_emulated_npu import CACHED, _result, _results, _start

from support.quant_reference import (
    _logprob_rows,
    local_ct_export,
    w4a16_greedy_token_ids,
    w4a16_model,
)

NEAR_TIE_NATS = 0.25  # the bf16 tests' tolerance (test_quantized_on_emulated_npu.py)
NAMES = ("dense", "moe")


@pytest.fixture(scope="module")
def exports() -> dict[str, str]:
    return {"dense": str(local_ct_export("llama", scheme="w4a16")),
            "moe": str(local_ct_export("qwen3_moe", scheme="w4a16_moe"))}


@pytest.fixture(scope="module")
def runs(exports: dict[str, str]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(device, export, dtype) -> result. The host runs both exports in one process per
    dtype; the NPU one process per export, the MoE one in the plan's graph mode."""
    both = os.pathsep.join(exports[name] for name in NAMES)
    host = {dtype: _start("host", both, "1", dtype) for dtype in ("float32", "bfloat16")}
    npu = {"dense": _start("npu", exports["dense"], "1", "bfloat16")}
    graphs = os.environ.get("GENERATE_GRAPH_MODE")
    os.environ["GENERATE_GRAPH_MODE"] = "DEFAULT"  # the NPU child: the plan's graph mode
    try:
        npu["moe"] = _start("npu", exports["moe"], "1", "bfloat16")
    finally:
        if graphs is None:
            del os.environ["GENERATE_GRAPH_MODE"]
        else:
            os.environ["GENERATE_GRAPH_MODE"] = graphs
    done = {("npu", name, "bfloat16"): _result(proc) for name, proc in npu.items()}
    for dtype, proc in host.items():
        results = _results(proc)
        assert len(results) == len(NAMES), len(results)
        done.update({("host", name, dtype): r for name, r in zip(NAMES, results, strict=True)})
    return done


@pytest.mark.parametrize("name", NAMES)
def test_host_float32_ids_equal_the_fake_quant_reference(runs, exports, name) -> None:  # type: ignore[no-untyped-def]
    host = runs["host", name, "float32"]
    assert host["quantization"] == "compressed-tensors"
    assert "CompressedTensorsLinearMethod" in host["quant_methods"]
    if name == "moe":
        assert "AscendW4A16MoeMethod" in host["quant_methods"]
    expected = w4a16_greedy_token_ids(exports[name], prompts(), MAX_NEW)
    assert host["runs"] == [expected, expected]
    assert host["cached_tokens"] == CACHED


def _parting_gap(export: str, prompt: list[int], host: list[int], npu: list[int]
                 ) -> float | None:
    """None when the continuations are equal; else the float32 reference's logprob gap
    between the host's and the NPU's token where they first part."""
    at = next((i for i, (a, b) in enumerate(zip(host, npu, strict=True)) if a != b), None)
    if at is None:
        return None
    with torch.no_grad():
        row = _logprob_rows(w4a16_model(export), prompt, host[: at + 1])[at]
    return abs(float(row[host[at]] - row[npu[at]]))


@pytest.mark.parametrize("name", NAMES)
def test_npu_bf16_gives_the_host_ids_up_to_near_ties(runs, exports, name) -> None:  # type: ignore[no-untyped-def]
    host, npu = runs["host", name, "bfloat16"], runs["npu", name, "bfloat16"]
    assert (npu["platform"], npu["ops"]) == ("AscendNpuPlatform", "NpuOps")
    assert {"npu_convert_weight_to_int4pack", "npu_weight_quant_batchmatmul"} <= set(
        npu["calls"])
    assert npu["cached_tokens"] == host["cached_tokens"] == CACHED
    parted = []
    for run in npu["runs"]:  # first pass, then the prefix-cached one
        for prompt, want, got in zip(prompts(), host["runs"][0], run, strict=True):
            gap = _parting_gap(exports[name], prompt, want, got)
            if gap is not None:
                parted.append(gap)
                assert gap <= NEAR_TIE_NATS, f"parted {gap:.3f} nats from the host's token"
    print(f"{name}: {len(parted)} of 16 continuations part (top-2 gaps): {parted}")
    assert len(parted) <= 2 * len(prompts()) // 4, parted  # near-ties stay the exception


def test_npu_moe_experts_ran_int4_in_the_plans_graph_mode(runs) -> None:  # type: ignore[no-untyped-def]
    npu = runs["npu", "moe", "bfloat16"]
    assert "AscendW4A16MoeMethod" in npu["quant_methods"]
    # On the NPU the method holds the experts int4 (no float route): its grouped matmuls.
    assert "npu_grouped_matmul" in npu["calls"]
    assert npu["graph_mode"] != "NONE" and npu["captured"] > 0, (npu["graph_mode"],
                                                                  npu["captured"])
