"""LLM.generate with NPU graphs (no enforce_eager) for a Qwen3-MoE-style and a
DeepSeek-V3-style (MLA + MoE) model on the emulated NPU: the eager NPU run's ids and the
host's, in the modes the plan gives them unasked and in FULL_AND_PIECEWISE.

- Qwen3-MoE, unset: FULL_AND_PIECEWISE (the dense default): uniform decode steps whole,
  the paged attention and the MoE layers inside; other steps in pieces.
- DeepSeek-V3, unset: FULL_DECODE_ONLY (vllm-ascend's default for MLA): each uniform
  decode step one graph, the MLA latent decode inside, its plan in the MLA builder's
  persistent buffer and its host-side lengths (actual_seq_lengths_kv) given to
  NPUGraph.update at each replay; asked FULL_AND_PIECEWISE, the other steps in pieces too.
  The same FULL_DECODE_ONLY run with the update forgotten (unit.fakes.graphs) gives other
  ids: each replay's latent decode reads the lengths of its capture.

The MoE layers read nothing back: routing, init-routing, grouped matmuls and the combine
keep fixed shapes (T*k rows), so the emulated device, which refuses a device-to-host read
during a capture, captures them; the MLA latent-cache write sends padding slots to vLLM's
reserved block, also without a read (tests/integration/npu_graphs/test_moe_mla_graphs.py
checks both one op at a time). Prompts of five lengths (1 to 150 tokens) finish prefill at
different steps, so decode batches of 3 to 5 requests are padded to the captured 4 and 8.
bf16, block 128, chunked prefill, two passes (the second finds the 150-token prompt's
first block cached). One engine per model and mode, each in a fresh process. An
emulator, not Ascend hardware.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from integration.npu.test_graphs_on_emulated_npu import (
    CAPTURE_SIZES,
    D2D_OUTSIDE_FULL_REPLAY,
    DEFAULT,
    H2D_OUTSIDE_FULL_REPLAY,
    OUTSIDE_FULL_REPLAY,
    STALE,
    assert_host_decode_is_vllms,
    assert_sampling_tail_replayed,
    assert_seeded_sampling_is_eagers,
    run_engines,
)

QWEN3_MOE, MLA_MOE = "qwen3_moe", "deepseek_v3_npu_mla_moe"
# (style, what the operator asks) -> the graph mode the engine runs.
GRAPH_RUNS: dict[tuple[str, str], str] = {
    (QWEN3_MOE, DEFAULT): "FULL_AND_PIECEWISE",
    (MLA_MOE, DEFAULT): "FULL_DECODE_ONLY",
    (MLA_MOE, "FULL_AND_PIECEWISE"): "FULL_AND_PIECEWISE",
}
RUN_IDS = [f"{style}-{asked}" for style, asked in GRAPH_RUNS]
# Ops of the model that a full decode step must not launch from the host.
MODEL_OPS = ("fused_infer_attention", "moe_", "grouped_matmul", "scatter_nd_update")


@pytest.fixture(scope="module")
def runs(npu_model_dirs: dict[str, str]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Every engine of this module, started once: (device, style, asked mode)."""
    keys = [("npu", style, "eager") for style in (QWEN3_MOE, MLA_MOE)]
    keys += [("npu", style, asked) for style, asked in GRAPH_RUNS]
    keys += [("npu", MLA_MOE, STALE)]
    return run_engines(npu_model_dirs, (QWEN3_MOE, MLA_MOE), keys)


def _pieces(model_dir: str) -> int:
    """Pieces vLLM's piecewise compiler cuts: one around each attention layer."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    return int(config["num_hidden_layers"]) + 1


@pytest.mark.parametrize(("style", "asked"), list(GRAPH_RUNS), ids=RUN_IDS)
def test_moe_and_mla_models_capture_full_graphs_and_give_the_eager_and_host_ids(
    runs, npu_model_dirs, style: str, asked: str
) -> None:
    eager, graphs = runs["npu", style, "eager"], runs["npu", style, asked]
    mode = GRAPH_RUNS[style, asked]
    assert graphs["graph_mode"] == mode and graphs["capture_sizes"] == CAPTURE_SIZES
    # Every graph at every size: none refused. A full graph is one; pieces one around
    # each attention layer.
    per_size = 1 + (_pieces(npu_model_dirs[style]) if mode == "FULL_AND_PIECEWISE" else 0)
    assert graphs["captured"] == per_size * len(CAPTURE_SIZES)
    assert eager["captured"] == 0 and eager["counters"]["graph_replays"] == 0
    counters = graphs["counters"]
    # Decode steps replay what was captured; nothing is captured while serving.
    assert counters["graph_replays"] > 0 and counters["graph_replayed_ops"] > 0
    assert counters["graph_captures"] == 0
    # No scalar read in either mode, the same copies back as eager (the sampled ids),
    # fewer ops launched from the host.
    assert counters["scalar_reads"] == 0 == eager["counters"]["scalar_reads"]
    assert counters["d2h_copies"] == eager["counters"]["d2h_copies"]
    assert counters["fallback_ops"] < eager["counters"]["fallback_ops"]
    assert graphs["runs"] == eager["runs"] == runs["host", style, "eager"]["runs"]
    assert len(graphs["runs"]) == 2
    assert graphs["cached_tokens"] == [0, 0, 0, 128, 0] == eager["cached_tokens"]
    # A decode step of 8 (captured size 8): one replay, attention and MoE layers inside.
    step, eager_step = graphs["decode_step"], eager["decode_step"]
    assert step["graph_replays"] == 1
    assert step["fallback_ops"] <= OUTSIDE_FULL_REPLAY < eager_step["fallback_ops"], step
    assert step["d2d_copies"] <= D2D_OUTSIDE_FULL_REPLAY and step["d2h_copies"] == 1, step
    assert step["h2d_copies"] <= H2D_OUTSIDE_FULL_REPLAY, step
    assert_sampling_tail_replayed(step, eager_step)
    assert_seeded_sampling_is_eagers(graphs, eager)
    launched = [k for k in step if k.startswith("op:") and any(m in k for m in MODEL_OPS)]
    assert not launched, launched
    assert any("fused_infer_attention" in k for k in eager_step)


def test_full_mla_graphs_whose_lengths_are_not_updated_give_other_ids(runs) -> None:
    """The FULL_DECODE_ONLY run with the runtime's graphs forgetting the update: each
    replay's latent decode reads the actual_seq_lengths_kv of its capture."""
    stale = runs["npu", MLA_MOE, STALE]
    assert stale["graph_mode"] == "FULL_DECODE_ONLY" and stale["captured"] == 4
    assert stale["counters"]["graph_replays"] > 0
    eager = runs["npu", MLA_MOE, "eager"]["runs"]
    assert stale["runs"] != eager
    # The first token comes from the prefill, which runs without graphs.
    assert [r[0] for r in stale["runs"][0]] == [r[0] for r in eager[0]]


def test_the_mla_pad_block_is_the_block_vllm_reserves_for_padding() -> None:
    from vllm.v1.attention.backends.utils import NULL_BLOCK_ID

    from adapters.torch.paged_rows import PAD_BLOCK

    assert PAD_BLOCK == NULL_BLOCK_ID  # never a request's block: padding rows land there


@pytest.fixture(scope="module")
def doctor_plans(npu_model_dirs: dict[str, str]) -> dict[str, dict[str, Any]]:
    """`ascend-doctor plan --json` of each style with no graph mode asked, on the
    emulated NPU, both in one child process (support.doctor_plans)."""
    import os

    from support.doctor_plans import doctor_plans as plans
    from support.torch_npu_emulator.activate import child_env

    env = child_env({k: v for k, v in os.environ.items() if not k.startswith("VLLM_ASCEND_")})
    env["VLLM_ASCEND_DEVICE"] = "npu"
    args = ["--dtype", "bfloat16", "--block-size", "128", "-cc.cudagraph_capture_sizes=[1,2,4,8]"]
    styles = (QWEN3_MOE, MLA_MOE)
    return dict(zip(styles, plans([[npu_model_dirs[s], *args] for s in styles], env),
                    strict=True))


@pytest.mark.parametrize("style", [QWEN3_MOE, MLA_MOE])
def test_the_doctor_plans_the_graph_mode_the_engine_runs(runs, doctor_plans, style) -> None:  # type: ignore[no-untyped-def]
    """Unset, the plan gives a MoE model the dense default and an MLA model
    FULL_DECODE_ONLY, with the reason; the engines above ran that mode."""
    from ascend_core.plan.graph import DEFAULT_DENSE_REASON, DEFAULT_MLA_REASON

    data = doctor_plans[style]["data"]
    engine = runs["npu", style, DEFAULT]
    assert data["execution"]["graph_mode"] == engine["graph_mode"] == GRAPH_RUNS[style, DEFAULT]
    assert data["graphs"]["mode"] == engine["graph_mode"]
    assert data["graphs"]["capture_sizes"] == engine["capture_sizes"]
    assert f"npu_graph_mode={engine['graph_mode']}," in data["plan"], data["plan"]
    reason = DEFAULT_MLA_REASON if style == MLA_MOE else DEFAULT_DENSE_REASON
    assert f"-> {engine['graph_mode']} ({reason})" in data["plan"], data["plan"]


def test_moe_and_mla_decode_inputs_made_on_the_host_are_vllms(runs) -> None:
    assert_host_decode_is_vllms(runs)
