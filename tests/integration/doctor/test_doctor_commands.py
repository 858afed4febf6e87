"""The installed `ascend-doctor` console script end to end: vLLM's real argument parser,
model directories on disk (header-only safetensors for the large architectures)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.hf_reference import local_model
from support.host_assumptions import without_torch_npu
from unit.doctor.large_models import (
    DEEPSEEK_V3_CONFIG,
    LLAMA_70B_CONFIG,
    deepseek_v3_description,
    deepseek_v3_headers,
    llama_70b_headers,
    write_model,
)

pytestmark = pytest.mark.vllm

DOCTOR = Path(sys.executable).with_name("ascend-doctor")
GIB = 1 << 30


def doctor(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_ASCEND_")}
    environ.update(env or {})
    return subprocess.run(
        [str(DOCTOR), *argv], capture_output=True, text=True, env=environ, timeout=600
    )


def plan_json(*serve_args: str) -> tuple[int, dict[str, Any]]:
    done = doctor("plan", "--json", "--", *serve_args)
    assert done.stdout.lstrip().startswith("{"), done.stderr[-2000:]
    return done.returncode, json.loads(done.stdout)


@without_torch_npu
def test_check_here_reports_the_missing_npu_stack_as_failures() -> None:
    done = doctor("check", "--json")
    data = json.loads(done.stdout)
    assert done.returncode == 2 and data["exit_code"] == 2
    by_name = {i["name"]: i for s in data["sections"] for i in s["items"]}
    assert by_name["vllm"]["status"] == "pass"
    assert by_name["torch_npu"]["fix"] == "pip install torch-npu==2.14.0"
    assert by_name["device"]["status"] == "fail"


def _loads(soname: str) -> bool:
    import ctypes

    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True


def test_check_for_the_host_device_passes_here() -> None:
    """Everything passes, but Mooncake's system library where this machine lacks it (the pd
    extra is installed here; Debian's libibverbs1 may not be): then that one item warns."""
    done = doctor("check", env={"VLLM_ASCEND_DEVICE": "cpu", "NO_COLOR": "1"})
    warned = [line for line in done.stdout.splitlines() if line.lstrip().startswith("WARN ")]
    if _loads("libibverbs.so.1"):
        assert (done.returncode, warned) == (0, []), done.stdout
        assert done.stdout.rstrip().endswith("(exit 0)")
    else:
        assert done.returncode == 1, done.stdout
        assert len(warned) == 1 and "Mooncake system library" in warned[0], done.stdout
        assert "apt-get install libibverbs1" in done.stdout


def test_plan_llama_70b_from_disk_with_vllms_parser(tmp_path: Path) -> None:
    model = write_model(tmp_path / "llama70b", LLAMA_70B_CONFIG, llama_70b_headers())
    # vLLM's parser reads "-tp" and "32k" (32,000) the way `vllm serve` does.
    code, data = plan_json(str(model), "-tp", "4", "--max-model-len", "32k",
                           "--gpu-memory-utilization", "0.9")  # fmt: skip
    memory = data["data"]["memory"]
    assert memory["max_model_len"] == 32_000
    assert memory["weights_bytes_total"] == 141_107_412_992  # see the unit test's calculation
    assert memory["kv_bytes_per_token"] == 81_920
    # 24,020,538,982 B for KV (as in the unit test) = 293,120 tokens = 9 x 32,000.
    assert (memory["tokens"], memory["sequences"]) == (293_120, 9)
    assert code == 0, data


def test_plan_takes_kv_cache_memory_bytes_as_vllm_parses_it(tmp_path: Path) -> None:
    model = write_model(tmp_path / "llama70b", LLAMA_70B_CONFIG, llama_70b_headers())
    # "20G" is 20 GiB to vLLM's parser; the flag is the KV budget, utilization unused.
    code, data = plan_json(str(model), "-tp", "4", "--max-model-len", "32k",
                           "--kv-cache-memory-bytes", "20G")  # fmt: skip
    memory = data["data"]["memory"]
    assert memory["budget_flag"] == "--kv-cache-memory-bytes"
    assert memory["kv_bytes_available"] == 20 * GIB
    # 2,048 blocks of 128 tokens x 81,920 B = 262,144 tokens = 8 x 32,000.
    assert (memory["tokens"], memory["sequences"]) == (262_144, 8)
    assert code == 0, data


def test_plan_deepseek_v3_w8a8_from_disk(tmp_path: Path) -> None:
    model = write_model(
        tmp_path / "dsv3",
        DEEPSEEK_V3_CONFIG,
        deepseek_v3_headers(),
        deepseek_v3_description(),
    )
    code, data = plan_json(str(model), "--tensor-parallel-size", "16",
                           "--enable-expert-parallel", "--max-model-len", "32768",
                           "--gpu-memory-utilization", "0.9")  # fmt: skip
    memory = data["data"]["memory"]
    assert memory["weights_bytes_total"] == 672_987_229_184
    assert memory["kv_bytes_per_token"] == 70_272
    # 17,550,263,206 B for KV (unit test) = 249,728 tokens = 7 x 32,768.
    assert (memory["tokens"], memory["sequences"]) == (249_728, 7)
    sections = {s["title"]: s["items"] for s in data["sections"]}
    assert sections["quantization"][0]["detail"].startswith("ascend, model files")
    # MLA and MoE are served on an NPU, but at --tensor-parallel-size 16 each device holds
    # 8 of the 128 query heads and the MLA decode call takes 32, 64 or 128: the op limits
    # refuse it at plan time, and nothing else fails.
    failing = [i["detail"] for items in sections.values() for i in items if i["status"] == "fail"]
    assert code == 2 and len(failing) == 1, failing
    assert "8 query heads per device" in failing[0]


def test_plan_rejects_arguments_vllm_rejects() -> None:
    done = doctor("plan", "--", "some/model", "--tensor-parallel-size", "two")
    assert done.returncode == 2
    assert "vllm serve does not accept" in done.stderr


def test_plan_tiny_llama_in_text() -> None:
    tiny_llama = local_model("llama", "tiny")  # built once, shared with the vLLM tests
    done = doctor("plan", "--", str(tiny_llama), "--max-model-len", "2048", env={"NO_COLOR": "1"})
    assert done.returncode in (0, 1), done.stdout + done.stderr[-2000:]
    assert "LlamaForCausalLM (llama): 2 layers" in done.stdout
    assert "KV cache holds" in done.stdout
