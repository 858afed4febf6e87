"""`plan` on the host device: the KV cache the host default gives, from the memory numbers of
the runtime port, the same number the worker computes; a flag taking most of the RAM warns."""

from __future__ import annotations

import json
from typing import Any

from adapters.vllm.worker.kv_cache_bytes import kv_cache_budget
from ascend_core.memory_budget import ACTIVATION_FACTOR, RUNTIME_RESERVE_BYTES
from ports.model_files import TensorHeader
from ports.runtime import MemoryInfo
from unit.doctor.test_cli import run, wiring
from unit.fakes.model_files import FakeModelFiles
from unit.fakes.runtime import FakeRuntime

GIB = 1 << 30
SMALL_LLAMA: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 512,
    "intermediate_size": 1024,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "vocab_size": 1000,
    "max_position_embeddings": 2048,
    "torch_dtype": "bfloat16",
}
HEADERS = (
    TensorHeader("model.embed_tokens.weight", "BF16", (1000, 512)),
    TensorHeader("lm_head.weight", "BF16", (1000, 512)),
)
WEIGHTS = 2 * 1000 * 512 * 2
KV_PER_TOKEN = 2 * 2 * 8 * 64 * 2  # K,V x layers x KV heads x head_dim x bf16


def _plan(memory: MemoryInfo, *flags: str) -> tuple[dict[str, str], dict[str, Any], str]:
    """The memory section's item statuses, its data, and the text report."""
    files = {"/m/small": FakeModelFiles({"config.json": SMALL_LLAMA}, HEADERS, "/m/small")}
    c = wiring(env={"VLLM_ASCEND_DEVICE": "cpu"}, files=files)
    c.runtime.override(FakeRuntime(memory))
    # vLLM's parser leaves --gpu-memory-utilization at its default, 0.92, when not given.
    argv = ["/m/small", "--gpu-memory-utilization", "0.92", *flags]
    _, as_json = run(["plan", "--json", "--", *argv], c)
    _, text = run(["plan", "--", *argv], c)
    report = json.loads(as_json)
    (section,) = [s for s in report["sections"] if s["title"] == "memory budget"]
    statuses = {item["name"]: item["status"] for item in section["items"]}
    return statuses, report["data"]["memory"], text


def test_the_doctor_shows_the_number_the_worker_computes_from_the_same_memory() -> None:
    # A busy host (5 GiB available of 24 GiB), so the share rules and not the 4 GiB cap.
    memory = MemoryInfo(free_bytes=5 * GIB, total_bytes=24 * GIB)
    statuses, data, text = _plan(memory)
    assert statuses["KV cache"] == "pass" and "host RAM" not in statuses
    # The doctor's reserve estimate: runtime, and activations of 8192 tokens (bf16).
    reserve = RUNTIME_RESERVE_BYTES + 8192 * ACTIVATION_FACTOR * 512 * 2
    # The worker reads the memory once the weights are loaded and its working memory is
    # held: what the doctor estimates them to be is what is no longer available then.
    at_serve = MemoryInfo(5 * GIB - WEIGHTS - reserve, 24 * GIB, WEIGHTS + reserve)
    worker = kv_cache_budget(at_serve, 0.92, None, 2048 * KV_PER_TOKEN, 2048, 128, host_workers=1)
    assert data["kv_bytes_available"] == worker.kv_cache_bytes == (5 * GIB - WEIGHTS - reserve) // 2
    assert data["host_default"]["available_bytes"] == 5 * GIB - WEIGHTS - reserve
    assert f"gives {worker.kv_cache_bytes} B" in text
    assert "the host default, min(4.00 GiB cap, 0.50 x" in text


def test_a_large_host_shows_the_cap() -> None:
    # 1024 sequences of 2048 tokens could fill 8 GiB: the 4 GiB cap rules.
    memory = MemoryInfo(free_bytes=20 * GIB, total_bytes=24 * GIB)
    statuses, data, _ = _plan(memory, "--max-num-seqs", "1024")
    assert statuses["KV cache"] == "pass"
    assert data["kv_bytes_available"] == 4 * GIB


def test_the_default_stops_at_what_max_num_seqs_sequences_can_fill() -> None:
    # vLLM's default 256 sequences (a host under 70 GiB) of 2048 tokens at 4 KiB a token
    # fill 2 GiB and one block, not the 4 GiB cap; the worker caps at the same number.
    memory = MemoryInfo(free_bytes=20 * GIB, total_bytes=24 * GIB)
    statuses, data, text = _plan(memory)
    usable = 256 * 2048 * KV_PER_TOKEN + 128 * KV_PER_TOKEN
    assert statuses["KV cache"] == "pass"
    assert data["kv_bytes_available"] == usable
    assert "that max_num_seqs=256 sequences of max_model_len=2048 can use" in text
    at_serve = MemoryInfo(18 * GIB, 24 * GIB, 2 * GIB)
    worker = kv_cache_budget(
        at_serve, 0.92, None, 2048 * KV_PER_TOKEN, 2048, 128, host_workers=1, max_num_seqs=256
    )
    assert worker.kv_cache_bytes == usable
    assert f"capped at the {usable} B" in worker.reason


def test_max_num_seqs_given_caps_at_its_own_value() -> None:
    memory = MemoryInfo(free_bytes=20 * GIB, total_bytes=24 * GIB)
    _, data, _ = _plan(memory, "--max-num-seqs", "4")
    assert data["kv_bytes_available"] == (4 * 2048 + 128) * KV_PER_TOKEN


def test_a_flag_that_takes_most_of_the_ram_is_a_warning() -> None:
    memory = MemoryInfo(free_bytes=20 * GIB, total_bytes=24 * GIB)
    statuses, data, text = _plan(memory, "--gpu-memory-utilization", "0.8")
    assert statuses["host RAM"] == "warn"
    assert data["host_default"] is None and data["budget_flag"] == "--gpu-memory-utilization"
    assert "WARN  host RAM" in text and "80% of the host's 24.00 GiB RAM" in text
    statuses, _, text = _plan(memory, "--gpu-memory-utilization", "0.3")
    assert statuses["host RAM"] == "pass" and "PASS  host RAM" in text


def test_tensor_parallel_on_the_host_is_not_limited_to_one_device() -> None:
    # `vllm serve --tensor-parallel-size 2` on the host starts two worker processes.
    files = {"/m/small": FakeModelFiles({"config.json": SMALL_LLAMA}, HEADERS, "/m/small")}
    c = wiring(env={"VLLM_ASCEND_DEVICE": "cpu"}, files=files)
    c.runtime.override(FakeRuntime(MemoryInfo(free_bytes=20 * GIB, total_bytes=24 * GIB)))
    argv = ["/m/small", "--gpu-memory-utilization", "0.92", "--tensor-parallel-size", "2"]
    code, out = run(["plan", "--json", "--", *argv], c)
    report = json.loads(out)
    (model,) = [s for s in report["sections"] if s["title"] == "model"]
    assert code == 0, out
    assert "devices" not in {item["name"] for item in model["items"]}
    assert report["data"]["target"]["device_count"] is None


def test_plan_on_the_host_says_it_compiles_without_graphs() -> None:
    _, _, text = _plan(MemoryInfo(free_bytes=20 * GIB, total_bytes=24 * GIB))
    assert "graph NONE, compile DYNAMO_TRACE_ONCE" in text
    assert "one Dynamo trace, Inductor generates the host code" in text
    assert "no graphs: graph capture is an NPU feature" in text
