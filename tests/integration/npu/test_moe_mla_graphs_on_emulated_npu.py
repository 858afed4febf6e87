"""LLM.generate with NPU graphs (PIECEWISE, no enforce_eager) for a Qwen3-MoE-style and a
DeepSeek-V3-style (MLA + MoE) model on the emulated NPU: the eager NPU run's ids and the
host's.

The MoE layers sit inside the captured pieces: routing, init-routing, grouped matmuls
and the combine keep fixed shapes (T*k rows) and read nothing back, so the emulated
device, which refuses a device-to-host read during a capture, captures them; the MLA
layer's latent-cache write sends padding slots to vLLM's reserved block, also without a
read (tests/integration/npu_graphs/test_moe_mla_graphs.py checks both one op at a time).
Prompts of five lengths (1 to 150 tokens) finish prefill at different steps, so decode
batches of 3 to 5 requests are padded to the captured 4 and 8. bf16, block 128, chunked
prefill, two passes (the second finds the 150-token prompt's first block cached). One
engine per model and mode, each in a fresh process. An emulator, not Ascend hardware.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from integration.npu.test_generate_on_emulated_npu import _result
from integration.npu.test_graphs_on_emulated_npu import _start_graph

STYLES = ("qwen3_moe", "deepseek_v3_npu_mla_moe")
MODE = "PIECEWISE"
KINDS = (("host", "eager"), ("npu", "eager"), ("npu", MODE))


@pytest.fixture(scope="module")
def runs(npu_model_dirs: dict[str, str]) -> dict[tuple[str, str, str], dict[str, Any]]:
    keys = [(device, style, mode) for style in STYLES for device, mode in KINDS]
    done: dict[tuple[str, str, str], dict[str, Any]] = {}
    for at in range(0, len(keys), 3):  # a few engines at a time: a small machine
        procs = {
            key: _start_graph(key[0], npu_model_dirs[key[1]], None if key[2] == "eager" else key[2])
            for key in keys[at : at + 3]
        }
        done.update({key: _result(proc) for key, proc in procs.items()})
    return done


def _pieces(model_dir: str) -> int:
    """Pieces vLLM's piecewise compiler cuts: one around each attention layer."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    return int(config["num_hidden_layers"]) + 1


@pytest.mark.parametrize("style", STYLES)
def test_moe_and_mla_models_capture_graphs_and_give_the_eager_and_host_ids(
    runs, npu_model_dirs, style: str
) -> None:
    eager, graphs = runs["npu", style, "eager"], runs["npu", style, MODE]
    assert graphs["graph_mode"] == MODE and graphs["capture_sizes"] == [1, 2, 4, 8]
    pieces = _pieces(npu_model_dirs[style])
    assert graphs["captured"] == pieces * 4  # every piece at every size: none refused
    assert eager["captured"] == 0 and eager["counters"]["graph_replays"] == 0
    counters = graphs["counters"]
    # Decode steps replay their pieces; nothing is captured while serving.
    assert counters["graph_replays"] > 0 and counters["graph_replays"] % pieces == 0
    assert counters["graph_captures"] == 0 and counters["graph_replayed_ops"] > 0
    # The MoE layers' per-layer reads are gone: no scalar read in either mode, the same
    # copies back as eager (the sampled ids), fewer ops launched from the host.
    assert counters["scalar_reads"] == 0 == eager["counters"]["scalar_reads"]
    assert counters["d2h_copies"] == eager["counters"]["d2h_copies"]
    assert counters["fallback_ops"] < eager["counters"]["fallback_ops"]
    assert graphs["runs"] == eager["runs"] == runs["host", style, "eager"]["runs"]
    assert len(graphs["runs"]) == 2
    assert graphs["cached_tokens"] == [0, 0, 0, 128, 0] == eager["cached_tokens"]


def test_the_mla_pad_block_is_the_block_vllm_reserves_for_padding() -> None:
    from vllm.v1.attention.backends.utils import NULL_BLOCK_ID

    from adapters.paged_rows import PAD_BLOCK

    assert PAD_BLOCK == NULL_BLOCK_ID  # never a request's block: padding rows land there


def test_the_doctor_plans_the_graph_mode_the_moe_engine_runs(runs, npu_model_dirs) -> None:
    """Unset, the plan gives a MoE model PIECEWISE graphs, with the reason; the engines
    above ran that mode."""
    import os
    import subprocess
    import sys

    from ascend_core.plan.graph import NPU_MOE_PIECEWISE_REASON
    from support.torch_npu_emulator.activate import child_env

    env = child_env({k: v for k, v in os.environ.items() if not k.startswith("VLLM_ASCEND_")})
    env["VLLM_ASCEND_DEVICE"] = "npu"
    doctor = Path(sys.executable).with_name("ascend-doctor")
    args = ["--dtype", "bfloat16", "--block-size", "128", "-cc.cudagraph_capture_sizes=[1,2,4,8]"]
    done = subprocess.run(
        [str(doctor), "plan", "--json", "--", npu_model_dirs["qwen3_moe"], *args],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert done.stdout.lstrip().startswith("{"), done.stderr[-2000:]
    data = json.loads(done.stdout)["data"]
    engine = runs["npu", "qwen3_moe", MODE]
    assert data["execution"]["graph_mode"] == engine["graph_mode"] == "PIECEWISE"
    assert f"npu_graph_mode={engine['graph_mode']}," in data["plan"], data["plan"]
    assert NPU_MOE_PIECEWISE_REASON in data["plan"], data["plan"]
