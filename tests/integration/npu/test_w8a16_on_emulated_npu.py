"""ModelSlim W8A16 (int8 weights dequantized per output channel, float activations),
served: three fresh processes (generate_run.py, batch of 8 mixed lengths, chunked by
max_num_batched_tokens=64, then a prefix-cached second pass), eager.

- host, float32: CpuWeightQuantOps; the greedy ids equal the fake-quant reference's
  (support.quant_reference: the export's int8 weights dequantized as ModelSlim writes
  them, (weight - weight_offset) * weight_scale, in a plain transformers model), both
  passes. The export's zero points are far from zero (asymmetric per channel), so a sign
  slip in weight_offset would not pass.
- NPU, bf16, on the emulated torch_npu: NpuWeightQuantOps (npu_weight_quant_batchmatmul,
  the offset negated at load); the ids equal the host's bf16 ids up to bf16 near-ties:
  where a continuation parts from the host's, the bf16 reference's top-2 gap at that step
  must be under NEAR_TIE_NATS (the golden test bounds the op's parting at one bf16 ulp).
  An emulator, not Ascend hardware.
Dense only: vllm-ascend serves ModelSlim W8A16 for linear layers, not MoE experts (the
support table refuses W8A16 experts before load).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from generate_run import MAX_NEW, prompts
from test_generate_on_emulated_npu import CACHED, _result, _start

from support.doctor_plan import PER_LAYER_MARGIN, doctor_memory
from support.quant_reference import fake_quant_model, greedy_token_ids, local_export

NEAR_TIE_NATS = 0.05
NPU_MEASURE_MARGIN = 64 << 10  # the emulated device counts exact bytes
RUNS = (("host", "float32"), ("host", "bfloat16"), ("npu", "bfloat16"))


@pytest.fixture(scope="module")
def export() -> Path:
    return local_export("llama", "w8a16")


@pytest.fixture(scope="module")
def runs(export: Path) -> dict[tuple[str, str], dict[str, Any]]:
    procs = {key: _start(key[0], str(export), "1", key[1]) for key in RUNS}
    return {key: _result(proc) for key, proc in procs.items()}


def test_every_linear_is_w8a16_and_ran_through_its_port(runs) -> None:  # type: ignore[no-untyped-def]
    for key in RUNS:
        assert runs[key]["quantization"] == "ascend", key
        linear = [m for m in runs[key]["quant_methods"] if m.endswith("LinearMethod")]
        assert linear == ["AscendW8A16LinearMethod"], (key, runs[key]["quant_methods"])
    npu = runs["npu", "bfloat16"]
    assert (npu["platform"], npu["ops"]) == ("AscendNpuPlatform", "NpuOps")
    assert "npu_weight_quant_batchmatmul" in npu["calls"]
    assert "npu_quant_matmul" not in npu["calls"] and "npu_dynamic_quant" not in npu["calls"]


def test_host_float32_ids_equal_the_fake_quant_reference(runs, export: Path) -> None:  # type: ignore[no-untyped-def]
    host = runs["host", "float32"]
    expected = greedy_token_ids(export, prompts(), MAX_NEW)
    assert host["runs"] == [expected, expected]
    assert host["cached_tokens"] == CACHED


def _top2_gap(model: Any, prompt: list[int], prefix: list[int]) -> float:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + prefix])).logits[0, -1].float()
    top = torch.log_softmax(logits, dim=-1).topk(2).values
    return float(top[0] - top[1])


def test_npu_bf16_ids_are_the_host_bf16_ids_up_to_near_ties(runs, export: Path) -> None:  # type: ignore[no-untyped-def]
    host, npu = runs["host", "bfloat16"], runs["npu", "bfloat16"]
    assert host["runs"][0] == host["runs"][1]
    assert npu["cached_tokens"] == host["cached_tokens"] == CACHED
    reference = fake_quant_model(export, torch.bfloat16)
    parted = []
    for run in npu["runs"]:  # first pass, then the prefix-cached one
        for prompt, got, want in zip(prompts(), run, host["runs"][0], strict=True):
            if got == want:
                continue
            at = next(i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b)
            gap = _top2_gap(reference, prompt, want[:at])
            parted.append((at, gap))
            assert gap < NEAR_TIE_NATS, f"parted at step {at} where the top-2 gap is {gap:.3f}"
    assert len(parted) <= 2, parted  # near-ties are rare: at most 2 of 16 continuations


def test_weight_memory_is_int8_and_what_the_doctor_plans(runs, export: Path) -> None:  # type: ignore[no-untyped-def]
    npu = runs["npu", "bfloat16"]["weights"]
    assert abs(npu["weights_measured"] - (npu["weights_held"] + npu["buffers"])) <= (
        NPU_MEASURE_MARGIN), npu
    doctor = doctor_memory(str(export), "bfloat16")["weights_bytes_total"]
    assert doctor <= npu["weights_held"] <= doctor + PER_LAYER_MARGIN * npu["linears"], (
        npu, doctor)
