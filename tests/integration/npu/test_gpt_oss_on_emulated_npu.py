"""gpt-oss through the plugin's NPU path on the emulated torch_npu gives the host's ids.

The tiny gpt-oss model (scripts/make_models.make_gpt_oss_model: window 16 on layer 0,
sinks in both layers, biased experts with the clamped SwiGLU) in bf16, one run on the
host device and one on the emulated NPU (generate_run.py, a fresh process each): eight
prompts of 1 to 263 tokens (all but two longer than the window), chunked prefill, a
second pass that hits the prefix cache. On the NPU the windows run through
npu_fused_infer_attention_score's band mode (prefill) and a [B, KV_S] mask (decode),
the sinks through its softmax LSE, the experts through npu_clipped_swiglu. An emulator,
not Ascend hardware: every call bound against the 2.14.0 schemas and computed with the
op docs' formulas (tests/unit/npu golden tests: bf16 tolerance for the sink rescale,
which rounds the op's bf16 output once more; the experts bit for bit).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from integration.npu.generate_run import LENGTHS
from integration.npu.test_generate_on_emulated_npu import _result, _start
from support.child_runs import read_all
from support.hf_reference import MODELS_DIR, make_models_module


def _start_graphs(model: str) -> Any:
    """The NPU run with the plan's graph mode (decode steps as full graphs: the window's
    pre_tokens are static per layer, its decode mask and the sink rescale device ops over
    the plan's persistent buffers), over the same prompts and passes as the eager runs."""
    saved = {k: os.environ.get(k) for k in ("GENERATE_GRAPH_MODE", "GENERATE_LENGTHS")}
    os.environ["GENERATE_GRAPH_MODE"] = "DEFAULT"
    os.environ["GENERATE_LENGTHS"] = ",".join(map(str, LENGTHS))
    try:
        return _start("npu", model)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, Any]]:
    model = str(make_models_module().make_gpt_oss_model(MODELS_DIR / "tiny-gpt_oss"))
    procs = {device: _start(device, model) for device in ("host", "npu")}
    procs["npu graphs"] = _start_graphs(model)  # the three side by side: small engines
    return read_all(procs, _result)


def test_npu_path_gives_the_host_token_ids(runs) -> None:  # type: ignore[no-untyped-def]
    host, npu = runs["host"], runs["npu"]
    assert (npu["platform"], npu["ops"], npu["device_type"]) == (
        "AscendNpuPlatform", "NpuOps", "npu"
    )
    assert host["ops"] == "CpuOps"
    assert npu["runs"] == host["runs"]
    first, again = npu["runs"]
    assert again == first
    assert npu["cached_tokens"] == host["cached_tokens"] and sum(npu["cached_tokens"]) > 0


def test_windows_sinks_and_experts_run_through_torch_npu(runs) -> None:  # type: ignore[no-untyped-def]
    npu = runs["npu"]
    assert {
        "npu_fused_infer_attention_score",
        "npu_clipped_swiglu",
        "npu_grouped_matmul",
        "npu_moe_gating_top_k_softmax",
    } <= set(npu["calls"])
    assert "npu_swiglu" not in npu["calls"]  # no SiLU experts, no dense MLP
    # Decodes (mode 0: with the window mask on layer 0, without on layer 1), prefills of
    # the full layer (3, rightDownCausal) and of the sliding one (4, band).
    assert npu["sparse_modes"] == [0, 3, 4]


def test_npu_graphs_give_the_host_ids(runs) -> None:  # type: ignore[no-untyped-def]
    graphs = runs["npu graphs"]
    assert graphs["captured"] > 0 and graphs["counters"]["graph_replays"] > 0
    assert graphs["counters"]["graph_captures"] == 0  # nothing captured while serving
    assert graphs["runs"] == runs["host"]["runs"]


def test_npu_decode_step_reads_back_only_the_sampled_ids(runs) -> None:  # type: ignore[no-untyped-def]
    """The window mask, the sink rescale and the expert biases are device ops on the
    plan's device tensors: still one copy back a step, no scalar read, no dynamic shape."""
    step = runs["npu"]["decode_step"]
    assert (step["d2h_copies"], step["scalar_reads"], step["dynamic_shape_ops"]) == (1, 0, 0)
