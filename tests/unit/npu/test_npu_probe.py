"""The NPU probe: each missing piece gives a structured reason and the fix."""

from __future__ import annotations

from adapters.npu.probe import CannLibraryFinder, DavinciDeviceLister, NpuProbe
from ports.device import ChipFamily, DeviceFacts, DeviceKind
from support.host_assumptions import without_torch_npu
from unit.fakes.environment import FakeEnvironment

CANN = "/usr/local/Ascend/ascend-toolkit/latest"


def spec_found(name):
    return object() if name == "torch_npu" else None


def libs(*present):
    return lambda lib: f"{CANN}/lib64/{lib}" if lib in present else None


BOTH_LIBS = libs("libascendcl.so", "libhccl.so")


def make_probe(
    env=None, find_spec=spec_found, find_library=BOTH_LIBS, devices=(0, 1), read_facts=None
):
    return NpuProbe(
        FakeEnvironment(env or {}),
        find_spec=find_spec,
        find_library=find_library,
        list_devices=lambda: list(devices),
        read_facts=read_facts,
    )


def test_missing_torch_npu_names_the_package_and_the_pip_command():
    result = make_probe(find_spec=lambda name: None).probe()
    assert (result.kind, result.available) == (DeviceKind.NPU, False)
    assert "torch_npu is not installed" in result.reason
    assert "pip install torch-npu==2.14.0" in result.hint


def test_missing_cann_library_names_it_and_set_env():
    result = make_probe(find_library=libs("libascendcl.so")).probe()
    assert not result.available
    assert "libhccl.so" in result.reason and "libascendcl.so" not in result.reason
    assert "set_env.sh" in result.hint


def test_both_libraries_missing_are_both_named():
    result = make_probe(find_library=libs()).probe()
    assert "libascendcl.so, libhccl.so" in result.reason


def test_no_device_node():
    result = make_probe(devices=()).probe()
    assert not result.available
    assert "/dev/davinci" in result.reason and "npu-smi" in result.hint


def test_visible_devices_variable_that_hides_every_device():
    result = make_probe(env={"ASCEND_RT_VISIBLE_DEVICES": "4,5"}).probe()
    assert not result.available
    assert "ASCEND_RT_VISIBLE_DEVICES=4,5: id(s) [4, 5] out of range" in result.reason
    assert "use ids below 2" in result.hint


def test_visible_devices_are_logical_ids_not_davinci_numbers():
    # A container given /dev/davinci4 and /dev/davinci5: CANN numbers them 0 and 1.
    result = make_probe(env={"ASCEND_RT_VISIBLE_DEVICES": "1"}, devices=(4, 5)).probe()
    assert result.available
    assert "1 visible NPU(s) [1] (logical ids of the 2 /dev/davinci<N> nodes)" in result.reason
    assert not make_probe(env={"ASCEND_RT_VISIBLE_DEVICES": "4"}, devices=(4, 5)).probe().available


def test_a_malformed_variable_still_serves_what_cann_reads_and_says_so():
    result = make_probe(env={"ASCEND_RT_VISIBLE_DEVICES": "0, 1"}).probe()
    assert result.available
    assert "1 visible NPU(s) [0]" in result.reason
    assert "' 1' is not a device id" in result.reason


def test_empty_visible_devices_hides_all():
    assert not make_probe(env={"ASCEND_RT_VISIBLE_DEVICES": ""}).probe().available


def test_available_with_the_visible_subset_and_facts_when_a_reader_is_wired():
    facts = DeviceFacts(DeviceKind.NPU, ChipFamily.A3, 1, 64 * 2**30, "Ascend910_9391")
    result = make_probe(env={"ASCEND_RT_VISIBLE_DEVICES": "1"}, read_facts=lambda: facts).probe()
    assert result.available and result.facts == facts
    assert "1 visible NPU(s) [1]" in result.reason and "libhccl.so" in result.reason


def test_facts_are_not_read_when_a_check_fails():
    def boom():
        raise AssertionError("must not initialise the runtime")

    assert not make_probe(devices=(), read_facts=boom).probe().available


def test_library_finder_searches_ld_library_path_then_ascend_home():
    files = {"/opt/b/libhccl.so", f"{CANN}/lib64/libascendcl.so"}
    env = FakeEnvironment({"LD_LIBRARY_PATH": "/opt/a::/opt/b", "ASCEND_HOME_PATH": CANN})
    finder = CannLibraryFinder(env, is_file=files.__contains__)
    assert finder.search_path() == ["/opt/a", "/opt/b", f"{CANN}/lib64"]
    assert finder("libhccl.so") == "/opt/b/libhccl.so"
    assert finder("libascendcl.so") == f"{CANN}/lib64/libascendcl.so"
    assert CannLibraryFinder(FakeEnvironment(), is_file=files.__contains__)("libhccl.so") is None


def test_device_lister_reads_davinci_nodes_only():
    names = ["davinci0", "davinci3", "davinci_manager", "devmm_svm", "davinci12", "null"]
    assert DavinciDeviceLister(listdir=lambda d: names)() == [0, 3, 12]

    def missing(d):
        raise FileNotFoundError(d)

    assert DavinciDeviceLister(listdir=missing)() == []


@without_torch_npu
def test_default_probe_here_reports_torch_npu_missing():
    # The default find_spec, on a machine without torch_npu.
    result = NpuProbe(FakeEnvironment()).probe()
    assert not result.available and "torch_npu" in result.reason


@without_torch_npu
def test_loader_names_the_fix_when_torch_npu_cannot_be_imported():
    import pytest

    from adapters.npu.loader import load_torch_npu
    from ascend_core.errors import DeviceUnavailableError

    with pytest.raises(DeviceUnavailableError, match="torch_npu could not be imported") as err:
        load_torch_npu()
    assert "torch-npu==2.14.0" in err.value.hint and "set_env.sh" in err.value.hint
