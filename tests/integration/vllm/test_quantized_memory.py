"""After load, a quantized model holds its int8 weights plus scales (and its FLOAT tensors),
and the doctor's plan states the same number of weight bytes from the tensor headers.

Measured as the bytes of every distinct tensor storage the loaded model keeps (parameters
and the linear methods' derived scales); buffers (the rotary cos/sin cache, 1 MiB here)
are not weights, and the host's oneDNN pack cache of FLOAT layers is a GEMM cache: neither
side counts them. Margin: 64 bytes per linear layer for
the derived per-tensor scalars (1 / input_scale, the offset). The host device's runtime
port reports resident-set figures, which cannot resolve a few MiB of weights (measured:
reloading a 30 MB model moved the resident peak by 0 to 16 MB, the allocator reusing freed
memory), so the runtime port is not the measure here.
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
from engine_teardown import shut_down

from support.quant_reference import local_ct_export, local_export

DOCTOR = Path(sys.executable).with_name("ascend-doctor")
PER_LAYER_MARGIN = 64
CASES = [("modelslim", "w8a8"), ("modelslim", "w8a8_dynamic"), ("modelslim", "mixed"),
         ("compressed-tensors", "dynamic")]


def _export(kind: str, scheme: str) -> str:
    if kind == "modelslim":
        return str(local_export("llama", scheme))
    return str(local_ct_export("llama", scheme))


def _held_bytes(model: torch.nn.Module) -> tuple[int, int, int]:
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


def _doctor_weights(model: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_ASCEND_")}
    env["VLLM_ASCEND_DEVICE"] = "cpu"
    done = subprocess.run([str(DOCTOR), "plan", "--json", "--", model, "--dtype", "float32",
                           "--max-model-len", "512"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.stdout.lstrip().startswith("{"), done.stderr[-2000:]
    data: dict[str, Any] = json.loads(done.stdout)["data"]["memory"]
    return data


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


@pytest.mark.parametrize(("kind", "scheme"), CASES, ids=["-".join(c) for c in CASES])
def test_held_weight_bytes_equal_the_int8_tensors_plus_scales_and_the_doctors_number(
    kind: str, scheme: str
) -> None:
    from vllm import LLM

    model = _export(kind, scheme)
    llm = LLM(model=model, dtype="float32", enforce_eager=True, max_model_len=512,
              kv_cache_memory_bytes=16 << 20, seed=0)
    try:
        loaded = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
        held, held_int8, linears = _held_bytes(loaded)
    finally:
        shut_down(llm)
    doctor = _doctor_weights(model)["weights_bytes_total"]
    int8_in_files = _header_int8_weight_bytes(model)
    assert held_int8 == int8_in_files > 0  # the weights stayed int8, none dequantized
    assert doctor <= held <= doctor + PER_LAYER_MARGIN * linears, (held, doctor)
