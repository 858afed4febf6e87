"""The agreement table's NPU rows: for each `vllm serve` argv, the runner `ascend-doctor plan`
says and the one vLLM's engine believes, on the emulated NPU, printed as JSON.

Started by test_doctor_serve_agreement.py in a child process with the emulator wired and
triton-ascend's driver presented as active (child_env(triton_driver=True), as on an NPU
host). Each row: VLLM_USE_V2_MODEL_RUNNER as given, the doctor's plan (--json), then
EngineArgs -> VllmConfig as `vllm serve` builds it (no engine starts, no weight loads).

Run as: python doctor_serve_npu_run.py ROWS_JSON (a list of [variable or null, argv]).
An emulator, not Ascend hardware.
"""

from __future__ import annotations

import io
import json
import os
import sys
from typing import Any


def one_row(variable: str | None, argv: list[str]) -> dict[str, Any]:
    from vllm.engine.arg_utils import AsyncEngineArgs

    from adapters.container import container
    from adapters.doctor.cli import main as doctor_main
    from adapters.vllm.engine.doctor_args import _serve_parser

    saved = dict(os.environ)
    os.environ.pop("VLLM_USE_V2_MODEL_RUNNER", None)
    if variable is not None:
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = variable
    try:
        out = io.StringIO()
        code = doctor_main(["plan", "--json", "--", *argv], root=container(), stdout=out)
        report = json.loads(out.getvalue())
        ns = _serve_parser().parse_args(argv)
        ns.model = ns.model_tag or ns.model
        config = AsyncEngineArgs.from_cli_args(ns).create_engine_config()
        return {
            "doctor_code": code,
            "doctor": report["data"]["model_runner"],
            "serve_v2": bool(config.use_v2_model_runner),
            "device": str(config.device_config.device_type),
        }
    finally:
        os.environ.clear()
        os.environ.update(saved)


def main(rows: str) -> None:
    os.environ["VLLM_ASCEND_DEVICE"] = "npu"
    results = [one_row(variable, argv) for variable, argv in json.loads(rows)]
    print("RESULT " + json.dumps(results), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
