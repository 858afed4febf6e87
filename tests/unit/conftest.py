"""tests/unit runs no compiler: every test there sees CC and CXX pointing at a stand-in
that refuses to compile and records the call, and a test that called it fails.

torch's C++ extensions (the host's native kernels, the emulated NPU device) read CXX at
each build, in this process and in the children it starts (Inductor reads it when its
config is first imported: children are covered, this process only if no test imported
it earlier). A test that needs compiled code belongs in tests/integration
(tests/integration/native/, tests/integration/npu_ops/); a unit test that reaches the
native kernels indirectly asks for the torch path (CpuOps' and CpuMoeOps' flags).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Property tests judge results, not speed: on a loaded 2-core machine input generation can
# be slow, which hypothesis would report as a failed health check or a missed deadline.
settings.register_profile(
    "unit", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("unit")

_REFUSE = """#!/bin/sh
echo "$0 $*" >> "{log}"
echo "error: tests/unit runs no compiler (tests/unit/conftest.py): move the test to \
tests/integration" >&2
exit 1
"""


@pytest.fixture(scope="session")
def refusing_compiler(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The stand-in compiler and the log of its calls."""
    directory = tmp_path_factory.mktemp("no_compiler")
    log = directory / "calls.log"
    log.touch()
    script = directory / "refuse-cxx"
    script.write_text(_REFUSE.format(log=log))
    script.chmod(0o755)
    return script, log


@pytest.fixture(autouse=True)
def no_compiler(
    refusing_compiler: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    script, log = refusing_compiler
    monkeypatch.setenv("CXX", str(script))
    monkeypatch.setenv("CC", str(script))
    start = log.stat().st_size
    yield
    with log.open() as calls:
        calls.seek(start)
        ran = calls.read().strip()
    if ran:
        pytest.fail(
            "a compiler ran under tests/unit (the host's native kernels, the emulated NPU "
            f"device or Inductor): {ran.splitlines()[0]}. Move the test to tests/integration, "
            "or give it the torch path (CpuOps(native_attention=False, native_write=False), "
            "CpuMoeOps(native_kernels=False)).",
            pytrace=False,
        )
