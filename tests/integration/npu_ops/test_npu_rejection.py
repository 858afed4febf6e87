"""NpuRejectionOps on the emulated `npu` device: the host's results, with no device-to-host
read in the verification step (the device counts every read back). One fresh process,
since the device is registered once per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

RUN = Path(__file__).with_name("rejection_device_run.py")


def test_npu_rejection_ops_equal_the_hosts_without_a_host_read() -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, str(RUN)], capture_output=True, text=True, env=env, timeout=600
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert result["devices"] == ["npu"]
    assert all(result["equal"].values()), result["equal"]
    assert result["syncs"] == 0
