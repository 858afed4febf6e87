"""The host mirror of V2's block tables (adapters/vllm/worker/v2_host_block_tables.py)
against vLLM's V2 BlockTables on the emulated `npu` device, V2's Triton kernels run in
Triton's interpreter: over decode steps whose requests gain blocks (V2's own
`append_block_ids` and `apply_staged_writes`, the mirror recording beside them), one
reusing a finished request's slot, batches of 6, 3, 8, 2 and 5 padded to 8, two KV cache
groups (block sizes 4 and 8; one run with the second group's slot mapping disabled), the
block-table rows the NPU's V2 runner makes on the host are `_gather_block_tables_kernel`'s
(each request's held blocks, the padding rows zero) and its slots are
`_compute_slot_mappings_kernel`'s, element for element, padding included. One fresh
process (the device and Triton's interpreter are set up once a process); no engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.torch_npu_emulator.activate import child_env

RUN = Path(__file__).with_name("v2_block_tables_run.py")


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    env = child_env(dict(os.environ, TRITON_INTERPRET="1", VLLM_ASCEND_DEVICE="npu",
                         OMP_NUM_THREADS="1"), triton_driver=True)  # fmt: skip
    proc = subprocess.run(
        [sys.executable, str(RUN)], capture_output=True, text=True, env=env, timeout=600
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    parsed: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    return parsed


def test_the_host_made_block_tables_and_slots_are_v2s_kernels(result: dict[str, Any]) -> None:
    cases = result["cases"]
    assert result["device"] == "npu" and len(cases) == 10
    assert all(c["block_tables"] for c in cases), cases
    assert all(c["slots"] for c in cases), cases
    # The slots compared are real ones: every token of an enabled group, none of a
    # disabled one (vLLM's -1 there, on both sides).
    for case in cases:
        groups = sum(case["enabled"])
        assert case["real_slots"] == groups * case["n"], case
