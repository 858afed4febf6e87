import pytest

from ascend_core.device_selection import DeviceRequest, select_device
from ascend_core.errors import DeviceUnavailableError
from ports.device import DeviceKind, ProbeResult

NO_NPU = ProbeResult(
    kind=DeviceKind.NPU,
    available=False,
    reason="torch_npu is not installed",
    hint="pip install torch-npu==2.14.0",
)
NPU_OK = ProbeResult(kind=DeviceKind.NPU, available=True, reason="8 devices of Ascend910B3")


def test_auto_without_npu_declines_with_the_probe_reason_and_the_way_out():
    decision = select_device(DeviceRequest.AUTO, NO_NPU)
    assert decision.declined
    assert "torch_npu is not installed" in decision.reason
    assert "VLLM_ASCEND_DEVICE=cpu" in decision.reason


def test_auto_with_npu_serves_on_npu():
    decision = select_device(DeviceRequest.AUTO, NPU_OK)
    assert decision.kind is DeviceKind.NPU
    assert "Ascend910B3" in decision.reason


def test_cpu_request_serves_on_host_even_when_npu_present():
    assert select_device(DeviceRequest.CPU, NPU_OK).kind is DeviceKind.CPU
    assert select_device(DeviceRequest.CPU, NO_NPU).kind is DeviceKind.CPU


def test_npu_request_without_npu_fails_now_naming_what_is_missing():
    with pytest.raises(DeviceUnavailableError) as err:
        select_device(DeviceRequest.NPU, NO_NPU)
    assert "torch_npu is not installed" in err.value.what
    assert err.value.hint == "pip install torch-npu==2.14.0"
