"""The quantization support table's rows on the emulated NPU, in a fresh process: for each
row, `ascend-doctor plan` and `vllm serve`'s config phase (our NPU platform's hook), as
tests/integration/vllm/test_quant_support_table.py runs them on the host. Prints one
RESULT line of JSON: row id -> [doctor refuses, serve refuses, the doctor's quantization
refusals, serve's error, the serving platform]. An emulator, not Ascend hardware.

Run as: python quant_table_run.py MODELS_JSON WORK_DIR (MODELS_JSON: style -> directory).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

_TESTS = Path(__file__).resolve().parents[2]


def main() -> None:
    sys.path[:0] = [str(_TESTS), str(_TESTS / "integration" / "vllm")]
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from support.torch_npu_emulator.activate import activate

    activate()
    from test_quant_support_table import agreement  # after the emulator is wired

    from support.quant_table import ROWS

    models = json.loads(sys.argv[1])
    where = Path(sys.argv[2])
    from vllm.platforms import current_platform

    out = {}
    for row, style, how, _ in ROWS:
        by_doctor, by_serve, failures, error = agreement(models, how, style, where)
        out[row] = [by_doctor, by_serve, failures, error,
                    type(current_platform).__name__]
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
