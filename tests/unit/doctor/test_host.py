"""The doctor's host facts come through the NPU probe's own CANN finder and device lister."""

from __future__ import annotations

from adapters.doctor.host import gather_host_facts
from adapters.npu.probe import CANN_LIBRARIES, CannLibraryFinder
from unit.fakes.environment import FakeEnvironment

CANN = "/usr/local/Ascend/ascend-toolkit/latest"


def test_libraries_and_devices_through_the_probe_lookups() -> None:
    files = {f"{CANN}/lib64/libascendcl.so"}
    finder = CannLibraryFinder(FakeEnvironment({"ASCEND_HOME_PATH": CANN}), files.__contains__)
    facts = gather_host_facts(finder, lambda: [4, 5], CANN_LIBRARIES)
    assert dict(facts.cann_libraries) == {
        "libascendcl.so": f"{CANN}/lib64/libascendcl.so",
        "libhccl.so": None,
    }
    assert facts.device_count == 2  # the count, not the /dev/davinci numbers
    assert facts.python_version.count(".") == 2
