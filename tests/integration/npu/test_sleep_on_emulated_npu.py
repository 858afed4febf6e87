"""Sleep mode and weight updates (vLLM's RL path) on the host device and on the NPU path
(emulated torch_npu and `npu` device), one engine per run, each run in a fresh process
(sleep_run.py): a dense and a MoE model on the host (fp32, eager) and on the NPU path
(bf16) with the plan's graphs captured; the NPU's weights and KV cache come from the sleep
pool that keeps their addresses (adapters/npu/vmm_pool.py), so its graphs outlive sleeps.

Each engine starts on weights W1, sleeps and wakes (level 1, all and by tag), releases
its KV cache (vLLM's release_kv_cache_memory, at the executor) and wakes it, sleeps at
level 2 and reloads W0 then W1 from their directories, then takes W0's and W1's tensors
handed over; its ids must equal those it gave fresh on W1 each time it holds W1 again.
The bytes measured are printed (pytest -s) and stated in docs/benchmarks.md.
The dense NPU run is made twice: on vLLM's V1 runner and on its V2 runner
(VLLM_USE_V2_MODEL_RUNNER=1, NpuModelRunnerV2, the plan's graphs: V2's FULL decode graphs
in its graph manager on the NPU's graphs, the pieces on the platform's wrapper; V2's
Triton kernels in Triton's interpreter); V2's persistent batch state and its graphs
serve every wake as V1's do. An emulator, not Ascend hardware.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.child_runs import last_result, read_all
from support.hf_reference import MODELS_DIR, local_model, make_model
from support.torch_npu_emulator.activate import child_env

RUNNER = Path(__file__).with_name("sleep_run.py")
RUNS = {
    "host-dense": ("host", "llama", ""),
    "host-moe": ("host", "qwen3_moe", ""),
    "npu-dense-graphs": ("npu", "llama", "graphs"),
    "npu-moe-graphs": ("npu", "qwen3_moe", "graphs"),
    "npu-dense-graphs-v2": ("npu", "llama", "graphs"),
}
V2_RUNS = {"npu-dense-graphs-v2"}  # on vLLM's V2 model runner
V2_RUNNER = "vllm.v1.worker.gpu.model_runner.GPUModelRunner"
SAME_AS_FRESH = (
    "after_level1",
    "after_level1_by_tag",
    "after_kv_released",
    "reloaded_w1_dir",
    "handed_w1",
)


def _weights(style: str) -> tuple[str, str]:
    """(W1, W0): the same config, weights drawn with seeds 1 and 0."""
    w1 = make_model(MODELS_DIR / f"tiny-{style}-seed1", style, "tiny", seed=1)
    return str(w1), str(local_model(style, "tiny"))


def _start(device: str, style: str, graphs: str, v2: bool = False) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.pop("VLLM_ASCEND_DEVICE", None)
    env.pop("VLLM_USE_V2_MODEL_RUNNER", None)
    if device == "npu":
        env = child_env(env, triton_driver=v2)
    if v2:  # V2's Triton kernels interpreted; the plugin's own kernels on their torch path
        env.update(VLLM_USE_V2_MODEL_RUNNER="1", TRITON_INTERPRET="1")
        env["VLLM_ASCEND_TRITON_KERNELS"] = "off"
    env["OMP_NUM_THREADS"] = "1"
    args = [sys.executable, str(RUNNER), device, *_weights(style), *([graphs] if graphs else [])]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, cwd=RUNNER.parent)


def _result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    return last_result(proc)


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, Any]]:
    procs = {name: _start(*spec, v2=name in V2_RUNS) for name, spec in RUNS.items()}
    results = read_all(procs, _result)
    for name, result in results.items():
        for key in ("bytes_awake", "bytes_level1", "bytes_weights_only",
                    "bytes_before_kv_release", "bytes_kv_released", "bytes_before_level2",
                    "bytes_level2"):
            print(f"{name} {key}: {result[key]}")
    return results


@pytest.mark.parametrize("name", list(RUNS))
def test_waking_and_reloading_give_the_fresh_engines_ids(runs, name) -> None:  # type: ignore[no-untyped-def]
    run = runs[name]
    for key in SAME_AS_FRESH:
        assert run[key] == run["fresh_w1"], key
    # W0 is other weights: its ids differ, from its directory and handed over alike.
    assert run["reloaded_w0_dir"] != run["fresh_w1"]
    assert run["handed_w0"] == run["reloaded_w0_dir"]


@pytest.mark.parametrize("name", list(RUNS))
def test_sleep_releases_the_kv_cache_and_at_level_2_the_weights(runs, name) -> None:  # type: ignore[no-untyped-def]
    run = runs[name]
    awake, level1, level2 = run["bytes_awake"], run["bytes_level1"], run["bytes_level2"]
    kv, weights = awake["kv_cache"], awake["weights"]
    assert kv == 16 << 20 and weights > 0
    assert level1["kv_cache"] == 0 and level2["kv_cache"] == level2["weights"] == 0
    on_npu = name.startswith("npu")
    # The host keeps its weights in place at level 1 (host memory is where they would go).
    assert level1["weights"] == (0 if on_npu else weights)
    # Allocated device bytes drop by what was released, read just before each sleep (each
    # generate call leaves a little more allocated). The host's heap count holds every
    # malloc of the process: a few KiB come and go between the readings, and level 2's
    # copy of the model's buffers (rotary caches) is host memory too.
    slack = 0 if on_npu else 2 << 20
    before2 = run["bytes_before_level2"]
    assert awake["allocated"] - level1["allocated"] >= kv + (weights if on_npu else 0) - slack
    assert before2["allocated"] - level2["allocated"] >= kv + weights - slack
    if on_npu:
        # The pool holds the weights and the KV cache alone (each allocation rounded up
        # to the emulator's 4 KiB granularity): no runner state that a level-2 sleep would
        # discard (V2 builds its sampler's state in load_model, outside the pool).
        assert before2["allocated"] - level2["allocated"] <= kv + weights + (256 << 10)
    assert run["bytes_woken"]["kv_cache"] == kv and run["bytes_woken"]["weights"] == weights
    by_tag = run["bytes_weights_only"]
    assert by_tag["kv_cache"] == 0 and by_tag["weights"] == weights


@pytest.mark.parametrize("name", list(RUNS))
def test_release_kv_cache_memory_goes_through_the_sleep_port(runs, name) -> None:  # type: ignore[no-untyped-def]
    """vLLM's release_kv_cache_memory (the executor's discard of the KV cache) frees the
    KV cache alone; the ids after waking it are checked with the others (SAME_AS_FRESH)."""
    run = runs[name]
    before, released = run["bytes_before_kv_release"], run["bytes_kv_released"]
    kv = before["kv_cache"]
    assert kv == 16 << 20
    assert released["kv_cache"] == 0 and released["weights"] == before["weights"]
    slack = 0 if name.startswith("npu") else 2 << 20
    assert before["allocated"] - released["allocated"] >= kv - slack


def test_a_released_weight_refuses_use_on_the_npu(runs) -> None:  # type: ignore[no-untyped-def]
    assert "device memory was released" in runs["npu-dense-graphs"]["touch_level1"]
    assert runs["npu-dense-graphs"]["weight_devices"] == ["npu"]


@pytest.mark.parametrize("name", list(RUNS))
def test_each_run_is_served_by_the_runner_it_asked_for(runs, name) -> None:  # type: ignore[no-untyped-def]
    run = runs[name]
    assert run["engine_v2"] is (name in V2_RUNS)
    assert (V2_RUNNER in run["runner_mro"]) is (name in V2_RUNS), run["runner_mro"]
    if name in V2_RUNS:
        assert run["runner_mro"][0].endswith("NpuModelRunnerV2")


@pytest.mark.parametrize("name", ["npu-dense-graphs", "npu-moe-graphs", "npu-dense-graphs-v2"])
def test_graphs_outlive_sleep_on_the_npu(runs, name) -> None:  # type: ignore[no-untyped-def]
    """The NPU's sleep pool (adapters/npu/vmm_pool.py) unmaps and maps again at the same
    addresses: the graphs captured at start serve every wake, none captured again."""
    graphs = runs[name]
    assert graphs["graph_mode"] != "NONE" and graphs["captured_first"] > 0
    assert graphs["addresses_kept"]
    assert graphs["captured_total"] == graphs["captured_first"]
