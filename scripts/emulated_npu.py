"""Run any command with the emulated NPU active in it and in every Python process it starts.

    .venv/bin/python scripts/emulated_npu.py [--devices N] [--soc NAME] [--memory BYTES] \\
        -- COMMAND [ARGS...]

e.g. `VLLM_ASCEND_DEVICE=npu .venv/bin/python scripts/emulated_npu.py -- .venv/bin/vllm
serve models/tiny-llama --dtype bfloat16 --block-size 128 --enforce-eager`.

Test support, not product: Python processes started under it load
tests/support/emulated_npu_site/sitecustomize.py, which injects the emulated torch_npu
(ops bound against the torch_npu 2.14.0 schemas) and installs the emulated `npu` device
(a C++ PrivateUse1 extension over host memory, built on first use into .cache/). Nothing
here runs on Ascend hardware.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.torch_npu_emulator.activate import child_env


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=1, help="emulated NPUs (default 1)")
    parser.add_argument("--soc", default="Ascend910B1", help="SoC name the NPUs report")
    parser.add_argument(
        "--memory", type=int, default=4 << 30, help="bytes per emulated NPU (default 4 GiB)"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    env = child_env(soc_name=args.soc, device_count=args.devices, memory_bytes=args.memory)
    os.execvpe(command[0], command, env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
