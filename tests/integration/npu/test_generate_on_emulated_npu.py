"""LLM.generate through the plugin's NPU path on the emulated torch_npu gives the host's ids.

The runs are fresh processes (generate_run.py), since vLLM fixes its platform once per
process: one on the host device (its engines one after the other), one per model with the
emulated torch_npu injected into the NPU wiring, so that vLLM activates
AscendNpuPlatform, which builds NpuWorker with NpuRuntime and NpuModelRunner (vLLM's
GPU runner) and computes through NpuOps, every torch_npu call bound against the
torch_npu 2.14.0 schemas and executed with the host's reference semantics. Weights, KV
cache and activations are tensors of the emulated `npu` device
(host memory underneath), where an op mixing devices fails: this is an emulator, not
Ascend hardware.

bf16 (the NPU attention op takes no float32 query) and block size 128 (its paged
prefill needs a multiple of 128). Prompts longer than max_num_batched_tokens run as
chunked prefill; the second pass over the same prompts hits the prefix cache. The K and
V caches reach the attention op as allocated (it refuses non-contiguous caches), so the
KV layout needs no copy.

DeepSeek-V3-style MLA (at the shapes torch_npu documents for it: latent 512, rope 64,
Q/K head 192, V 128, 32 heads; dense layers) runs its prefill through the op's TND
layout and its decode through the absorbed paged call with query_rope/key_rope.
Qwen3-MoE runs its experts through torch_npu's MoE ops (gating, init_routing_v2, grouped
matmul, token_unpermute). Both give the host's ids exactly: the host twins keep the NPU
ops' precision contract (float32 inside, one rounding at each op's output: rms_norm,
swiglu, the experts' matmuls, the combine with bf16 weights, attention) and the emulator
sums in the host's float32 order where the docs state none (tests/unit/npu golden tests,
bit for bit). The MLA model's second pass is not its first on either device: its batched
attention pads each call to the batch's longest sequence, and a different batch (the
cached prefixes) moves a near-tie of one prompt; the NPU path follows the host there too.
The same model with MoE layers (scripts/make_models.py --size npu-mla-moe: 16 experts in
4 groups, which npu_moe_gating_top_k accepts) runs DeepSeek-V3's grouped sigmoid routing
with its correction bias through the NPU's gating op, also with the host's ids.
"""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from support.child_runs import result_lines, start_on

RUNNER = Path(__file__).with_name("generate_run.py")
# Tokens the second pass finds cached: the full 128-token blocks of each prompt length.
CACHED = [0, 128, 0, 128, 0, 128, 0, 256]
STYLES = ("llama", "qwen3")
MOE_STYLES = ("qwen3_moe",)
MLA_STYLES = ("deepseek_v3_npu_mla", "deepseek_v3_npu_mla_moe")
ALL_STYLES = STYLES + MOE_STYLES + MLA_STYLES
AT_ONCE = 4  # processes side by side: the host's and three of the NPU's
TOLERANCE_NATS = 0.25


def _start(device: str, model: str, *args: str) -> subprocess.Popen[str]:
    # Every Python process vLLM starts must see the emulated NPU too (a cold model-info
    # cache makes vLLM inspect the model in a subprocess): start_on's child_env.
    return start_on(device, RUNNER, model, *args)


def _result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    return _results(proc)[-1]


def _results(proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    """Every RESULT line of the run, in order (generate_run.py prints one per model)."""
    return result_lines(proc)


@pytest.fixture(scope="module")
def runs(npu_model_dirs: dict[str, str]) -> dict[tuple[str, str], dict[str, Any]]:
    # The host's runs one after the other in one process (one start of Python, torch and
    # vLLM for them all), read in a thread while the NPU's run beside it, a few at a time.
    host = _start("host", os.pathsep.join(npu_model_dirs[style] for style in ALL_STYLES))
    with ThreadPoolExecutor(AT_ONCE) as reader:  # no run waits on a full pipe
        host_results = reader.submit(_results, host)
        keys = [("npu", style) for style in ALL_STYLES]
        done: dict[tuple[str, str], dict[str, Any]] = {}
        for at in range(0, len(keys), AT_ONCE - 1):  # a small machine
            procs = {key: _start("npu", npu_model_dirs[key[1]])
                     for key in keys[at : at + AT_ONCE - 1]}  # fmt: skip
            read = {key: reader.submit(_result, proc) for key, proc in procs.items()}
            done.update({key: future.result() for key, future in read.items()})
        results = host_results.result()
    assert len(results) == len(ALL_STYLES), len(results)
    done.update({("host", style): r for style, r in zip(ALL_STYLES, results, strict=True)})
    return done


@pytest.mark.parametrize("style", ALL_STYLES)
def test_npu_path_gives_the_host_token_ids(runs, style: str) -> None:
    host, npu = runs["host", style], runs["npu", style]
    assert (host["platform"], host["worker"], host["ops"]) == (
        "AscendHostPlatform",
        "HostWorker",
        "CpuOps",
    )
    assert (npu["platform"], npu["worker"], npu["ops"], npu["device_type"]) == (
        "AscendNpuPlatform",
        "NpuWorker",
        "NpuOps",
        "npu",
    )
    # vLLM's default async scheduling: the sampled ids come back on the runner's copy
    # stream, with its events (the host device runs one step at a time).
    assert npu["async_scheduling"] and not host["async_scheduling"]
    # Weights and KV cache live on the device (no mixed-device op: the run would fail).
    assert npu["devices"] == {"parameters": ["npu"], "kv_caches": ["npu"]}
    assert host["devices"] == {"parameters": ["cpu"], "kv_caches": ["cpu"]}
    assert npu["runs"] == host["runs"]  # both passes: batched and chunked, then prefix hits
    first, again = npu["runs"]
    if style not in MLA_STYLES:  # see the module docstring
        assert again == first
    # Seeded top-k/top-p sampling draws the same tokens (CPU generators on both devices).
    assert npu["sampled"] == host["sampled"] and len(npu["sampled"]) == 3
    # Every prompt of at least one full block found it cached on the second pass.
    assert npu["cached_tokens"] == CACHED == host["cached_tokens"]


@pytest.mark.parametrize("style", ALL_STYLES)
def test_npu_decode_step_reads_back_only_the_sampled_ids(runs, style: str) -> None:
    step = runs["npu", style]["decode_step"]
    # One device-to-host copy (the sampled ids), no scalar read, no data-dependent shape:
    # the MLA lengths come from the runner's host copy (MlaMetadataBuilder), its cache
    # write sends padding slots to vLLM's reserved block, and the MoE layers keep all
    # T*k rows (the grouped matmuls take the routed counts on the device).
    assert (step["d2h_copies"], step["scalar_reads"], step["dynamic_shape_ops"]) == (1, 0, 0)


@pytest.mark.parametrize("style", STYLES)
def test_npu_path_ran_every_op_through_torch_npu(runs, style: str) -> None:
    npu = runs["npu", style]
    assert set(npu["calls"]) == {
        "npu_rms_norm",
        "npu_add_rms_norm",
        "npu_swiglu",
        "npu_mrope",
        "npu_scatter_pa_kv_cache",
        "npu_fused_infer_attention_score",
    }
    assert npu["sparse_modes"] == [0, 3]  # decode batches and (chunked) prefill batches


@pytest.mark.parametrize("style", MOE_STYLES)
def test_npu_moe_path_runs_the_experts_through_torch_npu(runs, style: str) -> None:
    npu = runs["npu", style]
    assert (npu["platform"], npu["ops"]) == ("AscendNpuPlatform", "NpuOps")
    assert {
        "npu_moe_gating_top_k_softmax",
        "npu_moe_init_routing_v2",
        "npu_grouped_matmul",
        "npu_swiglu",
        "npu_moe_token_unpermute",
        "npu_fused_infer_attention_score",
    } <= set(npu["calls"])


@pytest.mark.parametrize("style", MLA_STYLES)
def test_npu_mla_path_runs_prefill_and_decode_through_torch_npu(runs, style: str) -> None:
    npu = runs["npu", style]
    assert (npu["platform"], npu["ops"]) == ("AscendNpuPlatform", "NpuOps")
    assert {"npu_scatter_nd_update_", "npu_fused_infer_attention_score"} <= set(npu["calls"])
    # TND prefill with the causal mask; BSND decode with the rope inputs, no mask.
    assert [list(c) for c in npu["attention_calls"]] == [["BSND", True, 0], ["TND", False, 3]]


def test_npu_grouped_sigmoid_routing_runs_through_npu_moe_gating_top_k(runs) -> None:
    npu = runs["npu", "deepseek_v3_npu_mla_moe"]
    assert {
        "npu_moe_gating_top_k",
        "npu_moe_init_routing_v2",
        "npu_grouped_matmul",
        "npu_moe_token_unpermute",
    } <= set(npu["calls"])
    assert "npu_moe_gating_top_k_softmax" not in npu["calls"]


@pytest.mark.parametrize("style", MLA_STYLES[:1])  # the MoE one is chaotic against HF bf16
def test_npu_mla_tokens_are_hf_bf16_top1_within_tolerance(runs, npu_model_dirs, style) -> None:  # type: ignore[no-untyped-def]
    """The wide MLA model is not in the host's bf16 tests (test_bf16_agreement.py): its
    tokens (the host's, and so the NPU path's) against transformers' bf16 top-1, with
    that test's MoE-style bar (near-ties: transformers' own bf16 and fp32 runs agree on
    31 of 48 tokens), each token within 0.25 nats, at most one in 16 beyond."""
    import torch
    from generate_run import prompts

    from support.hf_reference import load

    model, _ = load(npu_model_dirs[style], torch.bfloat16)
    gaps: list[float] = []
    with torch.no_grad():
        for prompt, generated in zip(prompts(), runs["npu", style]["runs"][0], strict=True):
            logits = model(torch.tensor([prompt + generated])).logits[0]
            logprobs = torch.log_softmax(logits.float(), -1)
            rows = logprobs[len(prompt) - 1 : len(prompt) - 1 + len(generated)]
            chosen = rows[torch.arange(len(generated)), torch.tensor(generated)]
            gaps += (rows.max(dim=-1).values - chosen).tolist()
    outliers = [g for g in gaps if g > TOLERANCE_NATS]
    assert len(outliers) <= len(gaps) / 16, outliers
