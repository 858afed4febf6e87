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
