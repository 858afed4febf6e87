"""The doctor's torchvision item: the release paired with the installed torch, or the fix."""

from __future__ import annotations

from ascend_core.preflight.items import CheckStatus
from ascend_core.preflight.run import run_preflight
from ascend_core.preflight.versions import paired_torchvision, torchvision_item
from unit.fakes.environment import FakeEnvironment
from unit.fakes.upstream import FakeUpstream


def test_each_supported_torch_has_its_torchvision_release() -> None:
    assert paired_torchvision("2.13.0+cpu") == "0.28.0"  # the host set
    assert paired_torchvision("2.14.0") == "0.29.0"  # the NPU set (aarch64 wheels are CPU builds)
    assert paired_torchvision("2.1.0") is None


def test_the_wheel_of_the_paired_release_passes_whatever_its_build_tag() -> None:
    # PyPI's x86_64 wheel says +cu130; install_torchvision.py rebuilds its ops for CPU torch.
    item = torchvision_item("2.13.0+cpu", "0.28.0+cu130")
    assert item.status is CheckStatus.PASS and "0.28.0" in item.detail


def test_absent_warns_naming_what_needs_it_and_the_install_command() -> None:
    item = torchvision_item("2.13.0+cpu", None)
    assert item.status is CheckStatus.WARN
    assert "vision-language" in item.detail and "Qwen3.5" in item.detail
    assert "scripts/install_torchvision.py" in item.fix


def test_a_release_built_for_another_torch_fails_with_the_pairing() -> None:
    item = torchvision_item("2.13.0+cpu", "0.27.1")
    assert item.status is CheckStatus.FAIL
    assert "pairs with torchvision 0.28.0" in item.detail and item.fix


def test_check_lists_the_item_with_the_versions() -> None:
    from ascend_core.preflight.host_facts import HostFacts
    from ports.device import DeviceKind, ProbeResult

    env = FakeEnvironment({"VLLM_ASCEND_DEVICE": "cpu"})
    upstream = FakeUpstream({"vllm": "0.33.0", "torch": "2.13.0+cpu", "torchvision": "0.28.0"})
    probe = ProbeResult(DeviceKind.NPU, False, "no NPU", "")
    result = run_preflight(env, upstream, probe, HostFacts(python_version="3.11.7"))
    (item,) = [i for i in result.items if i.name == "torchvision"]
    assert item.status is CheckStatus.PASS
