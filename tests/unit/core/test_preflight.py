"""`ascend-doctor check`'s items, driven through fake ports and fabricated hosts."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from ascend_core.preflight import (
    CheckItem,
    CheckStatus,
    HostFacts,
    Preflight,
    network_items,
    run_preflight,
    worst,
)
from ports.device import ChipFamily, DeviceFacts, DeviceKind, ProbeResult
from unit.fakes.environment import FakeEnvironment
from unit.fakes.upstream import FakeUpstream

GIB = 1 << 30
GOOD_VERSIONS = {
    "vllm": "0.33.0", "torch": "2.14.0", "torch_npu": "2.14.0", "torchvision": "0.29.0"
}
LIBS = {
    "libascendcl.so": "/usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so",
    "libhccl.so": "/usr/local/Ascend/ascend-toolkit/latest/lib64/libhccl.so",
}
SOURCED = {
    "ASCEND_HOME_PATH": "/usr/local/Ascend/ascend-toolkit/latest",
    "LD_LIBRARY_PATH": "/usr/local/Ascend/ascend-toolkit/latest/lib64:/usr/lib",
}
NPU_UP = ProbeResult(
    DeviceKind.NPU,
    True,
    "torch_npu installed, 8 visible NPU(s)",
    facts=DeviceFacts(DeviceKind.NPU, ChipFamily.A2, 8, 64 * GIB, "Ascend910B3"),
)
NO_NPU = ProbeResult(
    DeviceKind.NPU,
    False,
    "no NPU device visible: the driver exposes no /dev/davinci<N> node",
    "install the Ascend driver and firmware",
)


def check(
    env: Mapping[str, str] | None = None,
    versions: Mapping[str, str] | None = None,
    cann: str | None = "9.1.0",
    probe: ProbeResult = NPU_UP,
    libs: Mapping[str, str | None] | None = None,
    device_count: int | None = 8,
    interfaces: Mapping[str, tuple[str, ...]] | None = None,
    python: str = "3.11.7",
    multi_node: bool | None = None,
) -> Preflight:
    return run_preflight(
        FakeEnvironment(SOURCED if env is None else env),
        FakeUpstream(GOOD_VERSIONS if versions is None else versions, cann=cann),
        probe,
        HostFacts(python, LIBS if libs is None else libs, device_count, interfaces),
        multi_node,
    )


def item(result: Preflight, name: str) -> CheckItem:
    found = [i for i in result.items if i.name == name]
    assert len(found) == 1, f"{name}: {[i.name for i in result.items]}"
    return found[0]


def test_a_healthy_npu_host_passes_everything() -> None:
    result = check()
    assert result.status is CheckStatus.PASS, [i for i in result.items if i.status.rank]
    assert [i.name for i in result.items][:6] == [
        "python",
        "device",
        "vllm",
        "torch",
        "torch_npu",
        "CANN",
    ]
    assert "8 x Ascend910B3, 64 GiB each" in item(result, "device").detail


def test_wrong_torch_fails_with_the_pip_command() -> None:
    result = check(versions={**GOOD_VERSIONS, "torch": "2.13.0", "torchvision": "0.28.0"})
    torch = item(result, "torch")
    assert torch.status is CheckStatus.FAIL
    assert "torch 2.13.0 installed" in torch.detail
    assert torch.fix == "pip install torch==2.14.0"
    assert result.status is CheckStatus.FAIL


def test_missing_torch_npu_fails() -> None:
    versions = {k: v for k, v in GOOD_VERSIONS.items() if k != "torch_npu"}
    assert item(check(versions=versions), "torch_npu").fix == "pip install torch-npu==2.14.0"


def test_python_outside_vllms_range_fails() -> None:
    python = item(check(python="3.10.12"), "python")
    assert python.status is CheckStatus.FAIL
    assert ">=3.11,<3.15" in python.detail


def test_no_devices_fails_with_the_probes_reason_and_hint() -> None:
    device = item(check(probe=NO_NPU), "device")
    assert device.status is CheckStatus.FAIL
    assert "/dev/davinci" in device.detail
    assert device.fix.startswith("install the Ascend driver and firmware; or, ")
    # The way to serve on this machine anyway, said in this one item.
    assert "set VLLM_ASCEND_DEVICE=cpu" in device.fix


def test_host_device_skips_the_npu_items() -> None:
    result = check(
        env={"VLLM_ASCEND_DEVICE": "cpu"},
        versions={"vllm": "0.33.0", "torch": "2.13.0", "torchvision": "0.28.0"},
        cann=None,
        probe=NO_NPU,
    )
    assert result.status is CheckStatus.PASS
    names = {i.name for i in result.items}
    assert "CANN environment" not in names and "visible devices" not in names
    assert item(result, "VLLM_ASCEND_DEVICE").status is CheckStatus.PASS


def test_cann_installed_but_not_sourced_names_the_symptom() -> None:
    sourced = item(check(env={}), "CANN environment")
    assert sourced.status is CheckStatus.FAIL
    assert "not sourced" in sourced.detail and "Failed to infer device type" in sourced.detail
    assert "set_env.sh" in sourced.fix


def test_no_cann_at_all() -> None:
    result = check(env={}, cann=None)
    assert "no CANN toolkit found" in item(result, "CANN environment").detail
    assert item(result, "CANN").status is CheckStatus.FAIL


def test_ascend_home_path_without_an_install() -> None:
    sourced = item(check(cann=None), "CANN environment")
    assert sourced.status is CheckStatus.FAIL
    assert "no CANN install info" in sourced.detail


def test_missing_libraries_fail() -> None:
    libs = {**LIBS, "libhccl.so": None}
    libraries = item(check(libs=libs), "CANN libraries")
    assert libraries.status is CheckStatus.FAIL
    assert libraries.detail.startswith("libhccl.so not found")


def test_libraries_outside_ld_library_path_warn() -> None:
    env = {"ASCEND_HOME_PATH": SOURCED["ASCEND_HOME_PATH"]}
    libraries = item(check(env=env), "CANN libraries")
    assert libraries.status is CheckStatus.WARN
    assert "not in LD_LIBRARY_PATH" in libraries.detail


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("", "empty"),
        ("0,a", "'a' is not a device id"),
        ("0,-1", "'-1' is not a device id"),
        ("0,1,1", "[1] listed twice"),
        ("0,8", "[8] out of range; 8 device(s) here (ids 0..7)"),
    ],
)
def test_visible_devices_rules(value: str, fragment: str) -> None:
    visible = item(check(env={**SOURCED, "ASCEND_RT_VISIBLE_DEVICES": value}), "visible devices")
    assert visible.status is CheckStatus.FAIL
    assert fragment in visible.detail


def test_visible_devices_in_range_pass() -> None:
    visible = item(
        check(env={**SOURCED, "ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7"}), "visible devices"
    )
    assert visible.status is CheckStatus.PASS
    assert "4 of 8 device(s)" in visible.detail


def test_visible_devices_without_a_count_only_check_syntax() -> None:
    env = {**SOURCED, "ASCEND_RT_VISIBLE_DEVICES": "12"}
    assert item(check(env=env, device_count=None), "visible devices").status is CheckStatus.PASS


def test_misspelled_variable_warns_with_did_you_mean() -> None:
    result = check(env={**SOURCED, "VLLM_ASCEND_ENABLE_MLAP0": "1"})
    unknown = item(result, "VLLM_ASCEND_ENABLE_MLAP0")
    assert unknown.status is CheckStatus.WARN
    assert "VLLM_ASCEND_ENABLE_MLAPO" in unknown.fix
    assert result.status is CheckStatus.WARN


def test_retired_variable_names_its_replacement() -> None:
    retired = item(
        check(env={**SOURCED, "VLLM_ASCEND_ENABLE_FLASHCOMM": "1"}), "VLLM_ASCEND_ENABLE_FLASHCOMM"
    )
    assert retired.status is CheckStatus.WARN
    assert "VLLM_ASCEND_ENABLE_FLASHCOMM1" in retired.fix


def test_bad_value_of_a_registered_variable_fails() -> None:
    bad = item(check(env={**SOURCED, "VLLM_ASCEND_ENABLE_NZ": "7"}), "VLLM_ASCEND_ENABLE_NZ")
    assert bad.status is CheckStatus.FAIL
    assert "'7'" in bad.detail and "0, 1, 2" in bad.fix


def test_set_variables_are_listed_with_their_doc() -> None:
    listed = item(
        check(env={**SOURCED, "VLLM_ASCEND_TRAINING_CONSISTENCY": "1"}),
        "VLLM_ASCEND_TRAINING_CONSISTENCY",
    )
    assert listed.status is CheckStatus.PASS
    assert "Batch-invariant" in listed.detail


def test_a_set_variable_this_build_ignores_is_a_warning_saying_so() -> None:
    """The doctor says what serving will do: the plan warns for the same variable."""
    ignored = item(
        check(env={**SOURCED, "VLLM_ASCEND_ENABLE_MLAPO": "1"}), "VLLM_ASCEND_ENABLE_MLAPO"
    )
    assert ignored.status is CheckStatus.WARN
    assert "no effect in this build" in ignored.detail
    assert "additional_config.enable_mlapo" in ignored.detail  # the reference's replacement


def test_single_node_needs_no_network_variables() -> None:
    network = item(check(), "network")
    assert network.status is CheckStatus.PASS


HOST_NICS = {"lo": ("127.0.0.1",), "eth0": ("10.0.0.5",), "enp1s0": ("192.168.1.5",)}


def net(env: Mapping[str, str], interfaces: Mapping[str, tuple[str, ...]] | None = HOST_NICS):
    return {i.name: i for i in network_items(FakeEnvironment(env), True, interfaces)}


def test_consistent_multi_node_settings_pass() -> None:
    items = net(
        {
            "HCCL_IF_IP": "10.0.0.5",
            "GLOO_SOCKET_IFNAME": "eth0",
            "TP_SOCKET_IFNAME": "eth0",
            "HCCL_CONNECT_TIMEOUT": "1200",
        }
    )
    assert worst(i.status for i in items.values()) is CheckStatus.PASS, items


@pytest.mark.parametrize(
    ("env", "name", "fragment"),
    [
        ({"HCCL_IF_IP": "10.0.0.256"}, "HCCL_IF_IP", "not an IPv4 or IPv6 address"),
        ({"HCCL_IF_IP": "127.0.0.1"}, "HCCL_IF_IP", "cannot be reached"),
        ({"HCCL_IF_IP": "10.0.0.9"}, "HCCL_IF_IP", "not an address of this host"),
        ({"VLLM_HOST_IP": "eth0"}, "VLLM_HOST_IP", "not an IPv4 or IPv6 address"),
        ({"GLOO_SOCKET_IFNAME": "eth1"}, "GLOO_SOCKET_IFNAME", "no interface eth1"),
        ({"GLOO_SOCKET_IFNAME": "lo"}, "GLOO_SOCKET_IFNAME", "loopback"),
        ({"GLOO_SOCKET_IFNAME": "eth 0"}, "GLOO_SOCKET_IFNAME", "not a comma-separated"),
        ({"TP_SOCKET_IFNAME": "eth0,enp1s0"}, "TP_SOCKET_IFNAME", "not one interface"),
        ({"HCCL_SOCKET_IFNAME": "ib"}, "HCCL_SOCKET_IFNAME", "matches no interface"),
        ({"HCCL_SOCKET_IFNAME": "=eth"}, "HCCL_SOCKET_IFNAME", "matches no interface"),
        ({"HCCL_CONNECT_TIMEOUT": "60"}, "HCCL_CONNECT_TIMEOUT", "[120, 7200]"),
        ({"HCCL_CONNECT_TIMEOUT": "2m"}, "HCCL_CONNECT_TIMEOUT", "whole seconds"),
    ],
)
def test_network_failures(env: dict[str, str], name: str, fragment: str) -> None:
    found = net(env)[name]
    assert found.status is CheckStatus.FAIL
    assert fragment in found.detail


def test_hccl_prefix_and_exclusion_forms_pass() -> None:
    assert net({"HCCL_SOCKET_IFNAME": "en,eth"})["HCCL_SOCKET_IFNAME"].status is CheckStatus.PASS
    assert net({"HCCL_SOCKET_IFNAME": "=eth0"})["HCCL_SOCKET_IFNAME"].status is CheckStatus.PASS
    assert net({"HCCL_SOCKET_IFNAME": "^=docker0"})["HCCL_SOCKET_IFNAME"].status is CheckStatus.PASS


def test_multi_node_without_gloo_or_hccl_interface_warns() -> None:
    items = network_items(FakeEnvironment({"HCCL_CONNECT_TIMEOUT": "600"}), True, None)
    warned = {i.name for i in items if i.status is CheckStatus.WARN}
    assert warned == {"GLOO_SOCKET_IFNAME", "HCCL_IF_IP"}


def test_both_hccl_selectors_warn_that_one_is_ignored() -> None:
    items = network_items(
        FakeEnvironment(
            {"HCCL_IF_IP": "10.0.0.5", "HCCL_SOCKET_IFNAME": "eth", "GLOO_SOCKET_IFNAME": "eth0"}
        ),
        True,
        HOST_NICS,
    )
    ignored = [i for i in items if i.status is CheckStatus.WARN]
    assert len(ignored) == 1 and "HCCL_IF_IP takes precedence" in ignored[0].detail


def test_tp_and_gloo_interfaces_that_differ_warn() -> None:
    env = {"GLOO_SOCKET_IFNAME": "eth0", "TP_SOCKET_IFNAME": "enp1s0", "HCCL_IF_IP": "10.0.0.5"}
    items = network_items(FakeEnvironment(env), True, HOST_NICS)
    warnings = [i for i in items if i.status is CheckStatus.WARN]
    assert len(warnings) == 1
    assert "differs from GLOO_SOCKET_IFNAME=eth0" in warnings[0].detail
    assert warnings[0].fix == "set both to the same interface, e.g. TP_SOCKET_IFNAME=eth0"


def test_any_network_variable_makes_check_treat_the_host_as_multi_node() -> None:
    result = check(env={**SOURCED, "HCCL_IF_IP": "10.0.0.5"}, interfaces=HOST_NICS)
    assert "network" not in {i.name for i in result.items}
    assert item(result, "GLOO_SOCKET_IFNAME").status is CheckStatus.WARN


def test_worst_orders_statuses() -> None:
    assert worst([]) is CheckStatus.PASS
    assert worst([CheckStatus.WARN, CheckStatus.PASS]) is CheckStatus.WARN
    assert worst([CheckStatus.WARN, CheckStatus.FAIL]) is CheckStatus.FAIL
