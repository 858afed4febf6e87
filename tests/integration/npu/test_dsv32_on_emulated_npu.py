"""DeepSeek-V3.2 (sparse MLA with the lightning indexer) through the plugin's NPU path on
the emulated torch_npu gives the host device's ids, in bf16.

generate_run.py in two fresh processes (host, emulated NPU) over the tiny DeepSeek-V3.2
of scripts/make_models.py (index_topk 8, far below the prompts' lengths): 8 prompts up
to 263 tokens, chunked (max_num_batched_tokens 64), block size 128, then the same batch
from the prefix cache. On the NPU every token's top-k comes from npu_lightning_indexer
and its attention from npu_sparse_flash_attention (golden tests in tests/unit/npu: bit
for bit against the host twins); the rest of the model runs the NPU's MLA and MoE ops.

The NPU run takes the plan's graph mode (no enforce_eager): FULL_DECODE_ONLY, each
single-token decode step one NPU graph with the indexer's opaque op (key write, top-k)
and the sparse attention inside, their lengths in the builder's persistent buffers and
nothing read back (the emulated device refuses a read inside a capture); prefills and
mixed steps run compiled without graphs, the same ops launched from the host. Its ids are
the host's, both passes. (An eager NPU run launches those ops at every step; it repeated
what the compiled prefills and the captures launch, so it is not run here.)
An emulator, not Ascend hardware.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from test_generate_on_emulated_npu import _result, _start

from integration.npu.generate_run import CAPTURE_SIZES, LENGTHS
from support.child_runs import read_all
from support.hf_reference import MODELS_DIR, make_models_module


def _start_graphs(model: str) -> subprocess.Popen[str]:
    """The NPU run in the plan's graph mode, over the eager runs' prompts (generate_run's
    graph branch: two passes, the capture and replay counters)."""
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
def runs() -> dict[str, dict]:  # type: ignore[type-arg]
    model = str(make_models_module().make_dsv32_model(MODELS_DIR / "tiny-deepseek_v32"))
    return read_all({"host": _start("host", model), "npu-graphs": _start_graphs(model)},
                    _result)


def test_the_npu_path_gives_the_hosts_ids(runs) -> None:  # type: ignore[no-untyped-def]
    host, npu = runs["host"], runs["npu-graphs"]
    assert (npu["platform"], npu["device_type"]) == ("AscendNpuPlatform", "npu")
    assert npu["devices"] == {"parameters": ["npu"], "kv_caches": ["npu"]}
    assert npu["runs"] == host["runs"]  # both passes: chunked prefill, then prefix hits
    assert npu["cached_tokens"] == host["cached_tokens"] and sum(npu["cached_tokens"]) > 0


def test_the_npu_path_runs_the_indexer_and_sparse_attention_ops(runs) -> None:  # type: ignore[no-untyped-def]
    calls = set(runs["npu-graphs"]["calls"])
    assert {"npu_lightning_indexer", "npu_sparse_flash_attention",
            "npu_scatter_nd_update_"} <= calls
    # The dense MLA attention call is not made: every token goes the sparse way.
    assert "npu_fused_infer_attention_score" not in calls


def test_npu_graphs_capture_each_decode_step_whole_and_give_the_hosts_ids(runs) -> None:  # type: ignore[no-untyped-def]
    graphs, host = runs["npu-graphs"], runs["host"]
    assert graphs["graph_mode"] == "FULL_DECODE_ONLY"  # the plan's default for MLA
    assert graphs["capture_sizes"] == CAPTURE_SIZES and graphs["captured"] == len(CAPTURE_SIZES)
    counters = graphs["counters"]
    # Decode steps replay what was captured (decode batches of 1 to 8, padded to a size),
    # nothing captured while serving, nothing read back but the sampled ids.
    assert counters["graph_replays"] > 0 and counters["graph_captures"] == 0
    assert counters["scalar_reads"] == 0
    assert graphs["runs"] == host["runs"]  # chunked prefill, then prefix hits
    assert graphs["cached_tokens"] == host["cached_tokens"]
    # A decode step of 8: one replay, the indexer and the sparse attention inside it.
    step = graphs["decode_step"]
    # The indexer's and the attention's lengths stay device tensors (token rows, TND
    # running sums made on the device): no scalar read, no data-dependent shape.
    assert step["graph_replays"] == 1 and step["d2h_copies"] == 1, step
    assert (step["scalar_reads"], step["dynamic_shape_ops"]) == (0, 0), step
    launched = [k for k in step if k.startswith("op:") and any(
        name in k for name in ("lightning_indexer", "sparse_flash_attention", "scatter_nd"))]
    assert not launched, launched
