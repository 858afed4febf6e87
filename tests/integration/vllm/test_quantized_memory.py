"""After load, a quantized model holds its int8 weights plus scales (and its FLOAT tensors),
and the doctor's plan states the same number of weight bytes from the tensor headers;
the runtime port measures the same load.

Held: the bytes of every distinct tensor storage the loaded model keeps (parameters and
the methods' derived scales); buffers (the rotary cos/sin cache, 1 MiB here) are not
weights, and the host's oneDNN pack cache of FLOAT layers is a GEMM cache made on first
use: neither side counts them. Margin: 64 bytes per linear layer for the derived
per-tensor scalars (1 / input_scale, the offset) and input_offset held float32 (int8 in
the file). Scales are held float32 in every dtype, and the doctor counts them so (bf16
cases).

Measured: the runner's `model_memory_usage`, the change of the runtime port's allocated
bytes across the load (vLLM's own "Model loading took"); on the host that is glibc's
heap in use (mallinfo2), which counts every live malloc of the process, so it must equal
held + buffers within MEASURE_MARGIN: what the load leaves allocated besides the model's
tensors (CPython objects above its small-object size, the loader's state), measured 60 to
220 KiB in these cases and 400 KiB in a separate bf16 Qwen3-MoE process, independent of
the weights' size. The emulated NPU counts exactly (test_quantized_on_emulated_npu.py).
The resident set cannot resolve this (reloading a 30 MB model moved the resident peak by
0 to 16 MB: the allocator reuses freed memory).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from engine_teardown import shut_down

from support.doctor_plan import PER_LAYER_MARGIN, doctor_memories
from support.quant_reference import local_ct_export, local_export

MEASURE_MARGIN = 512 << 10
# (format, scheme, style, dtype)
CASES = [("modelslim", "w8a8", "llama", "float32"),
         ("modelslim", "w8a8_dynamic", "llama", "float32"),
         ("modelslim", "mixed", "llama", "float32"),
         ("modelslim", "mixed", "llama", "bfloat16"),
         ("modelslim", "w8a8_dynamic", "qwen3_moe", "float32"),
         ("modelslim", "w8a8_dynamic", "deepseek_v3", "bfloat16"),
         ("compressed-tensors", "dynamic", "llama", "float32"),
         ("compressed-tensors", "dynamic", "llama", "bfloat16")]


def _export(kind: str, scheme: str, style: str) -> str:
    if kind == "modelslim":
        return str(local_export(style, scheme))
    return str(local_ct_export(style, scheme))


def buffer_bytes(model: torch.nn.Module) -> int:
    return sum({b.untyped_storage().data_ptr(): b.untyped_storage().nbytes()
                for b in model.buffers()}.values())


def held_bytes(model: torch.nn.Module) -> tuple[int, int, int]:
    """(bytes of distinct storages, of which int8, number of linear layers)."""
    from vllm.model_executor.layers.linear import LinearBase

    storages: dict[int, tuple[int, torch.dtype]] = {}

    def add(t: Any) -> None:
        if isinstance(t, torch.Tensor):
            s = t.untyped_storage()
            storages[s.data_ptr()] = (s.nbytes(), t.dtype)

    for t in model.parameters():  # buffers (the rotary cos/sin cache) are not weights
        add(t)
    linears = 0
    for m in model.modules():
        linears += isinstance(m, LinearBase)
        for name, value in vars(m).items():
            if name.startswith("ascend_"):
                add(value)
    total = sum(n for n, _ in storages.values())
    int8 = sum(n for n, d in storages.values() if d == torch.int8)
    return total, int8, linears


def _header_int8_weight_bytes(model: str) -> int:
    from safetensors import safe_open

    total = 0
    for path in Path(model).glob("*.safetensors"):
        with safe_open(str(path), "pt") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open has no __iter__)
                sl = f.get_slice(key)
                if sl.get_dtype() == "I8" and len(sl.get_shape()) == 2:  # weights, not offsets
                    total += int(torch.tensor(sl.get_shape()).prod())
    return total


@pytest.fixture(scope="module")
def doctors() -> dict[tuple[str, str, str, str], int]:
    """Each case's weight bytes by the doctor's plan, every plan in one child process."""
    plans = doctor_memories([(_export(*case[:3]), case[3]) for case in CASES])
    return {case: plan["weights_bytes_total"] for case, plan in zip(CASES, plans, strict=True)}


@pytest.mark.parametrize(("kind", "scheme", "style", "dtype"), CASES,
                         ids=["-".join(c) for c in CASES])
def test_held_and_measured_weight_bytes_equal_the_int8_tensors_plus_scales_and_the_doctors(
    doctors: dict[tuple[str, str, str, str], int], kind: str, scheme: str, style: str,
    dtype: str,
) -> None:
    from vllm import LLM

    model = _export(kind, scheme, style)
    llm = LLM(model=model, dtype=dtype, enforce_eager=True, max_model_len=512,
              kv_cache_memory_bytes=16 << 20, seed=0)
    try:
        runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
        held, held_int8, linears = held_bytes(runner.model)
        buffers, measured = buffer_bytes(runner.model), runner.model_memory_usage
    finally:
        shut_down(llm)
    doctor = doctors[kind, scheme, style, dtype]
    int8_in_files = _header_int8_weight_bytes(model)
    assert held_int8 == int8_in_files > 0  # the weights stayed int8, none dequantized
    assert doctor <= held <= doctor + PER_LAYER_MARGIN * linears, (held, doctor)
    assert abs(measured - (held + buffers)) <= MEASURE_MARGIN, (measured, held, buffers)
