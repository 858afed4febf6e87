"""Qwen2.5-VL and Qwen3-VL through the plugin's NPU path on the emulated torch_npu, bf16:
the batch of test_qwen_vl_generate.py (one image, two images of different sizes, none,
one again) gives the host's greedy ids up to bf16 near-ties, with graphs in the plan's
mode, and the doctor's memory (encoder cache, tower activations, KV) is what the worker
allocated.

One engine per model style, each in a fresh process (vision_run.py): the NPU platform,
worker and runner on the emulated `npu` device. The tower's attention (every image, or
Qwen2.5-VL's window, a sequence) goes through npu_fused_infer_attention_score without a
cache; the language model's M-RoPE through npu_mrope's mrope mode (Qwen2.5-VL's chunked
sections) or, for Qwen3-VL's interleaved sections (a layout the op's docs do not give),
cos/sin gathered in torch and npu_rotary_mul; Qwen3-VL's DeepStack mergers feed the
language model's first layers. Decode steps run in the plan's default graphs
(FULL_AND_PIECEWISE), the tower eager (plan/encoder_graphs.py).

The host's ids are transformers' fp32 greedy ids (test_qwen_vl_generate.py proves the
host engine gives exactly those). Where the bf16 run leaves them, the fp32 model's top-2
gap at that step (its two best tokens' log-probabilities, the prompt and the shared
prefix teacher-forced) must be a near-tie, and the bf16 token the fp32 runner-up; the
gaps are printed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from integration.npu import vision_run
from support.hf_reference import MODELS_DIR, make_models_module
from support.torch_npu_emulator.activate import child_env

RUNNER = Path(__file__).with_name("vision_run.py")
STYLES = ("qwen2_5_vl", "qwen3_vl")
TOLERANCE_NATS = 0.25  # as test_generate_on_emulated_npu.py: a bf16 near-tie


@pytest.fixture(scope="module", params=STYLES)
def style(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def model_dir(style: str) -> str:
    return str(make_models_module().make_vl_model(MODELS_DIR / f"tiny-{style}", style))


@pytest.fixture(scope="module")
def run(model_dir: str) -> dict[str, Any]:
    env = child_env({k: v for k, v in os.environ.items() if k != "VLLM_ASCEND_DEVICE"})
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(
        [sys.executable, str(RUNNER), model_dir], capture_output=True, text=True, env=env,
        timeout=900, check=False,
    )
    out = proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, out[-4000:]
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    return result


@pytest.fixture(scope="module")
def host(model_dir: str) -> dict[str, Any]:
    """The processor's prompt ids, fp32 greedy ids and the fp32 model (for the gaps)."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(model_dir)
    hf = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    pictures = vision_run.images()
    cases = []
    for chat, picks in vision_run.chats(model_dir):
        inputs = processor(text=[chat], images=[pictures[i] for i in picks] or None,
                           return_tensors="pt")
        with torch.no_grad():
            ids = hf.generate(**inputs, max_new_tokens=vision_run.MAX_NEW,
                              min_new_tokens=vision_run.MAX_NEW, do_sample=False)
        cases.append((inputs, ids[0, inputs.input_ids.shape[1]:].tolist()))
    return {"hf": hf, "cases": cases}


def _top2_gap(hf: Any, inputs: Any, prefix: list[int]) -> tuple[float, list[int]]:
    """The fp32 model's next-token log-prob gap (top-1 minus top-2) after prompt + prefix,
    and its two best tokens."""
    ids = torch.cat([inputs.input_ids, torch.tensor([prefix], dtype=torch.long)], dim=1)
    length = inputs.input_ids.shape[1]
    extra = {k: v for k, v in inputs.items() if k not in ("input_ids", "attention_mask")}
    for key, value in extra.items():  # per-token inputs (token types): the prefix is text
        if value.dim() == 2 and value.shape == (1, length):
            extra[key] = torch.cat([value, value.new_zeros((1, len(prefix)))], dim=1)
    with torch.no_grad():
        logits = hf(input_ids=ids, attention_mask=torch.ones_like(ids), **extra).logits[0, -1]
    top = logits.float().log_softmax(-1).topk(2)
    return float(top.values[0] - top.values[1]), top.indices.tolist()


def test_the_npu_run_gives_the_hosts_ids_up_to_bf16_near_ties(run, host) -> None:  # type: ignore[no-untyped-def]
    assert run["prompt_ids"] == [c.input_ids[0].tolist() for c, _ in host["cases"]]
    first, again = run["runs"]
    assert again == first  # warm multimodal caches, the same batch: the same ids
    gaps = []
    for i, ((inputs, expected), got) in enumerate(zip(host["cases"], first, strict=True)):
        step = next((j for j, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b),
                    None)
        if step is None:
            continue
        gap, best = _top2_gap(host["hf"], inputs, expected[:step])
        gaps.append((i, step, round(gap, 4)))
        assert gap < TOLERANCE_NATS and got[step] == best[1], (i, step, gap, best, got, expected)
    print(f"bf16 departures (case, step, fp32 top-2 gap in nats): {gaps or 'none'}")
    # Most of the batch's tokens come before any departure: the host's, token for token.
    followed = sum(step for _, step, _ in gaps) + vision_run.MAX_NEW * (len(first) - len(gaps))
    assert followed >= vision_run.MAX_NEW * len(first) // 2, gaps


def test_the_tower_and_m_rope_ran_through_torch_npu_in_the_plans_graph_mode(  # type: ignore[no-untyped-def]
    run, style: str
) -> None:
    assert run["devices"] == ["npu"] and run["ops"] == "NpuOps"
    assert run["classes"] == ["AscendMMEncoderAttention", "AscendMRotaryEmbedding"]
    # The tower: BSND without a cache, every image (or window) one sequence.
    calls = run["encoder_calls"]
    assert calls and {layout for layout, _, _ in calls} == {"BSND"}
    assert {tuple(heads_dim) for _, heads_dim, _ in calls} == {(2, 32)}  # the tower's heads
    assert run["paged_calls"] > 0  # the language model's paged attention
    if style == "qwen2_5_vl":
        # Windowed blocks give many short sequences, the full block one per image:
        # lengths of several sizes in one call. M-RoPE: npu_mrope in mrope mode with the
        # model's chunked sections ([3, T] positions). No DeepStack.
        assert any(len(set(lens)) > 1 for _, _, lens in calls)
        assert run["mrope_calls"] == [[[3], [4, 6, 6]]] and run["deepstack_calls"] == 0
    else:
        # Full attention only: one sequence per image, images of different sizes in
        # different calls. Interleaved M-RoPE never reaches npu_mrope (its docs do not give
        # the interleave layout): npu_rotary_mul with the sections gathered in torch.
        assert len({n for _, _, lens in calls for n in lens}) > 1
        assert run["mrope_calls"] == [] and run["rotary_mul_calls"] > 0
        assert run["deepstack_calls"] > 0  # the mergers' features fed the language model
    # Graphs: the plan's default mode, decode steps replayed; the tower never captured.
    assert run["graph_mode"] == "FULL_AND_PIECEWISE" and not run["encoder_graphs"]
    assert run["captured"] > 0 and run["counters"]["graph_replays"] > 0


def test_the_doctor_shows_what_the_engine_ran_and_allocated(run, model_dir: str) -> None:  # type: ignore[no-untyped-def]
    """`ascend-doctor plan` for the same arguments: the graph mode the engine captured, the
    plan's word on the tower (eager, with the reason), and its memory: the encoder budget
    the runner profiled and the scheduler caches, the tower's outputs and activations at
    the profiling batch, the KV bytes per token the worker's cache tensors hold."""
    from ascend_core.plan.encoder_graphs import NPU_ENCODER_EAGER_REASON

    env = child_env({k: v for k, v in os.environ.items() if not k.startswith("VLLM_ASCEND_")})
    env["VLLM_ASCEND_DEVICE"] = "npu"
    doctor = Path(sys.executable).with_name("ascend-doctor")
    args = ["--dtype", "bfloat16", "--block-size", "128", "--max-model-len", "512",
            "--max-num-batched-tokens", "64", "--max-num-seqs", "4",
            "--kv-cache-memory-bytes", str(32 << 20), "--enable-prefix-caching",
            "--limit-mm-per-prompt", '{"image": 2, "video": 0}',
            "-cc.cudagraph_capture_sizes=[1,2,4]"]
    done = subprocess.run([str(doctor), "plan", "--json", "--", model_dir, *args],
                          capture_output=True, text=True, env=env, timeout=900, check=False)
    assert done.stdout.lstrip().startswith("{"), done.stderr[-2000:]
    data = json.loads(done.stdout)["data"]
    assert data["graphs"]["mode"] == run["graph_mode"]
    said = data["graphs"]["encoder"]
    assert said.startswith(f"the language model's steps are captured as a text model's "
                           f"({run['graph_mode']})") and NPU_ENCODER_EAGER_REASON in said
    assert f"encoder {said}" in data["plan"]

    from ascend_core.memory_budget import tower_bytes_per_patch

    doctor_said, held = data["memory"], run["memory"]
    encoder = doctor_said["encoder"]
    assert encoder["max_tokens_per_item"] == held["max_tokens_per_item"]
    assert (encoder["cache_tokens"], encoder["compute_tokens"]) == (
        held["cache_tokens"], held["compute_tokens"])
    assert held["scheduler_cache_tokens"] == encoder["cache_tokens"]
    modality, items = encoder["profile_modality"], encoder["profile_items"]
    assert (modality, items) == (held["profile_modality"], held["profile_items"])
    assert held["output_tokens"] == [encoder["max_tokens_per_item"][modality]] * items
    # bf16 outputs of the language model's hidden size (x 1 + DeepStack layers, Qwen3-VL).
    assert encoder["bytes_per_token"] == held["bytes_per_token"]
    assert encoder["cache_bytes"] == encoder["cache_tokens"] * held["bytes_per_token"]
    assert encoder["activation_bytes"] == held["patches"] * tower_bytes_per_patch(
        held["vision_hidden"], 2, held["patch_values"])
    # The device's peak while the tower encodes the profiling batch (above the raw pixels
    # the runner holds): within the estimate, and not far below it (these narrow towers
    # peak in the float32 pixel normalization, which the estimate counts exactly).
    peak, estimate = held["tower_peak_bytes"], encoder["activation_bytes"]
    assert estimate // 2 < peak <= estimate, (peak, estimate)
    assert held["kv_held"] == held["kv_slots"] * doctor_said["kv_bytes_per_token"]
