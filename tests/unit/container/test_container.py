"""The composition root: production wiring resolves; tests swap adapters by overriding providers."""

import pytest

from adapters.container import Container
from adapters.cpu.ops import CpuOps
from adapters.cpu.runtime import CpuRuntime
from ascend_core.errors import DeviceUnavailableError
from ports.device import DeviceKind, DeviceProbe, ProbeResult
from unit.fakes.environment import FakeEnvironment


class FakeNpuProbe(DeviceProbe):
    def __init__(self, result: ProbeResult) -> None:
        self.result = result
        self.calls = 0

    def probe(self) -> ProbeResult:
        self.calls += 1
        return self.result


ABSENT = ProbeResult(DeviceKind.NPU, False, "libascendcl.so not found", "source set_env.sh")


def make(env: dict[str, str], probe: ProbeResult = ABSENT) -> tuple[Container, FakeNpuProbe]:
    c = Container()
    fake_probe = FakeNpuProbe(probe)
    c.environment.override(FakeEnvironment(env))
    c.npu_probe.override(fake_probe)
    return c, fake_probe


def test_production_wiring_has_every_dependency():
    Container().check_dependencies()


def test_auto_without_npu_declines_and_gives_no_device_adapter():
    c, _ = make({})
    assert c.device_decision().declined
    with pytest.raises(RuntimeError, match=r"libascendcl\.so not found"):
        c.ops()


def test_cpu_request_wires_host_adapters_once_per_container():
    c, probe = make({"VLLM_ASCEND_DEVICE": "cpu"})
    assert isinstance(c.ops(), CpuOps)
    assert isinstance(c.runtime(), CpuRuntime)
    assert c.ops() is c.ops()
    assert c.communicator().backend == "gloo"
    assert probe.calls == 1


def test_npu_request_without_npu_fails_with_the_probe_hint():
    c, _ = make({"VLLM_ASCEND_DEVICE": "npu"})
    with pytest.raises(DeviceUnavailableError, match=r"source set_env\.sh"):
        c.device_decision()


def test_npu_found_selects_npu_adapters_with_the_injected_module(mocker):
    present = ProbeResult(DeviceKind.NPU, True, "1 device")
    c, _ = make({}, present)
    fake_torch_npu = mocker.Mock(name="torch_npu")
    c.torch_npu.override(fake_torch_npu)
    assert c.device_decision().kind is DeviceKind.NPU
    c.runtime().set_device(0)
    fake_torch_npu.npu.set_device.assert_called_once_with(0)


def test_probe_and_doctor_share_one_cann_finder_and_device_lister():
    c = Container()
    probe = c.npu_probe
    assert probe.kwargs["find_library"] is c.cann_library_finder
    assert probe.kwargs["list_devices"] is c.device_lister
    c.cann_library_finder.override(lambda lib: f"/cann/lib64/{lib}")
    c.device_lister.override(lambda: [4, 5, 6])
    facts = c.host_facts()
    assert dict(facts.cann_libraries) == {
        "libascendcl.so": "/cann/lib64/libascendcl.so",
        "libhccl.so": "/cann/lib64/libhccl.so",
    }
    assert facts.device_count == 3


def test_the_finder_and_upstream_read_the_overridden_environment(tmp_path):
    (tmp_path / "lib64").mkdir()
    (tmp_path / "lib64" / "libhccl.so").write_text("")
    c, _ = make({"ASCEND_HOME_PATH": str(tmp_path)})
    assert c.cann_library_finder()("libhccl.so") == str(tmp_path / "lib64" / "libhccl.so")
    assert c.upstream.args[0] is c.environment


def test_model_files_is_a_factory_of_directories(tmp_path):
    (tmp_path / "config.json").write_text('{"hidden_size": 8}')
    files = Container().model_files(str(tmp_path))
    assert files.read_json("config.json") == {"hidden_size": 8}


def test_importing_the_container_loads_no_torch():
    import subprocess
    import sys

    code = (
        "import sys, adapters.container\n"
        "c = adapters.container.Container()\n"
        "c.npu_probe(); c.host_facts()\n"
        "print(sorted(m for m in ('torch', 'torch_npu', 'vllm') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
