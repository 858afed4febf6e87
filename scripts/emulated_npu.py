"""Run any command with the emulated NPU active in it and in every Python process it starts.

    .venv/bin/python scripts/emulated_npu.py [--devices N] [--soc NAME] [--memory BYTES] \\
        -- COMMAND [ARGS...]

e.g. `VLLM_ASCEND_DEVICE=npu .venv/bin/python scripts/emulated_npu.py -- .venv/bin/vllm
serve models/tiny-llama --dtype bfloat16 --block-size 128` (NPU graphs captured and
replayed on the emulated device, as the plan decides).

Test support, not product: Python processes started under it load
tests/support/emulated_npu_site/sitecustomize.py, which injects the emulated torch_npu
(ops bound against the torch_npu 2.14.0 schemas) and installs the emulated `npu` device
(a C++ PrivateUse1 extension over host memory, built on first use into .cache/). Nothing
here runs on Ascend hardware.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.emulated_npu_device.build import CACHE, SOURCE

logger = logging.getLogger("emulated_npu")


def device_built() -> bool:
    """Whether some torch's build of the current device source has loaded before (the
    marker build.py writes); checked without importing torch, which takes seconds."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    return any(CACHE.glob(f"torch-*/{digest}/loaded.ok"))


def announce_start(built: bool) -> None:
    """Once, before the command: what the first seconds are spent on, and about how long.

    built: whether the emulated device is built already (device_built())."""
    if built:
        logger.info(
            "Each Python process of the command loads torch and the emulated torch_npu "
            "before its own first line (about 5-10 s each on 2 cores; vllm serve starts 2-3)."
        )
        return
    logger.info(
        "First start of the emulated NPU: the command's first Python process builds the "
        "emulated npu device (a C++ extension) into %s before anything else prints; about "
        "30-60 s on 2 cores, once per torch version and device source; then each Python "
        "process loads torch and the emulated torch_npu (about 5-10 s each).",
        CACHE,
    )


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
    from support.torch_npu_emulator.activate import child_env  # imports torch: seconds

    env = child_env(soc_name=args.soc, device_count=args.devices, memory_bytes=args.memory)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    announce_start(device_built())
    os.execvpe(command[0], command, env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
