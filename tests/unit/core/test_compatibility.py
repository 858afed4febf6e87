"""check_compatibility: each component ok / mismatch / missing, with the exact message and fix."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_core.compatibility import (
    SUPPORTED,
    CompatibilityVerdict,
    Component,
    InstalledVersions,
    ItemStatus,
    check_compatibility,
    installed_versions,
    parse_cann_version,
)
from ascend_core.errors import CompatibilityError, PlanErrors
from ports.device import DeviceKind
from unit.fakes.upstream import FakeUpstream

NPU_OK = InstalledVersions(vllm="0.33.0", torch="2.14.0", torch_npu="2.14.0", cann="9.1.0")
HOST_OK = InstalledVersions(vllm="0.33.0", torch="2.13.0+cpu")


def npu(**changes: str | None) -> CompatibilityVerdict:
    fields = {"vllm": "0.33.0", "torch": "2.14.0", "torch_npu": "2.14.0", "cann": "9.1.0"}
    fields.update(changes)
    return check_compatibility(InstalledVersions(**fields), DeviceKind.NPU)


def test_supported_npu_set_is_ok() -> None:
    verdict = check_compatibility(NPU_OK, DeviceKind.NPU)
    assert verdict.ok
    assert [i.component for i in verdict.items] == list(Component)
    assert all(i.status is ItemStatus.OK for i in verdict.items)
    verdict.raise_for_problems()


def test_supported_host_set_is_ok_and_npu_parts_not_needed() -> None:
    verdict = check_compatibility(HOST_OK, DeviceKind.CPU)
    assert verdict.ok
    assert verdict.item(Component.TORCH).status is ItemStatus.OK
    assert verdict.item(Component.TORCH_NPU).status is ItemStatus.NOT_NEEDED
    assert verdict.item(Component.CANN).status is ItemStatus.NOT_NEEDED


def test_torch_mismatch_on_npu_names_torch_npu_and_the_fix() -> None:
    item = npu(torch="2.13.0").item(Component.TORCH)
    assert item.status is ItemStatus.MISMATCH
    assert item.message == "torch 2.13.0 installed, torch_npu 2.14.0 needs torch 2.14.0."
    assert item.fix == "pip install torch==2.14.0"


def test_torch_mismatch_without_torch_npu_names_the_device() -> None:
    item = npu(torch="2.13.0", torch_npu=None).item(Component.TORCH)
    assert "the NPU device (with torch_npu 2.14.0) needs torch 2.14.0" in item.message


def test_torch_npu_post_release_is_accepted() -> None:
    assert npu(torch_npu="2.14.0.post2").ok


def test_missing_torch_npu() -> None:
    item = npu(torch_npu=None).item(Component.TORCH_NPU)
    assert item.status is ItemStatus.MISSING
    assert item.message == "torch_npu is not installed; the NPU device needs torch_npu 2.14.0."
    assert item.fix == "pip install torch-npu==2.14.0"


def test_wrong_torch_npu() -> None:
    item = npu(torch_npu="2.13.0").item(Component.TORCH_NPU)
    assert item.status is ItemStatus.MISMATCH
    assert item.message == "torch_npu 2.13.0 installed, the NPU device needs torch_npu 2.14.0."


def test_missing_cann_says_where_to_get_it_and_what_to_source() -> None:
    item = npu(cann=None).item(Component.CANN)
    assert item.status is ItemStatus.MISSING
    assert "torch_npu 2.14.0 needs CANN" in item.message
    assert "hiascend.com" in item.fix and "set_env.sh" in item.fix


@pytest.mark.parametrize("cann", ["8.5.0", "8.3.RC1", "9.1.RC1", "10.0.0"])
def test_cann_outside_the_range_is_a_mismatch(cann: str) -> None:
    item = npu(cann=cann).item(Component.CANN)
    assert item.status is ItemStatus.MISMATCH
    assert f"CANN {cann} installed" in item.message


@pytest.mark.parametrize("cann", ["9.1.0", "9.1.1", "9.2.RC1", "9.1.0.beta1"])
def test_cann_inside_the_range_is_ok(cann: str) -> None:
    assert npu(cann=cann).item(Component.CANN).status is ItemStatus.OK


def test_vllm_mismatch_and_missing() -> None:
    item = npu(vllm="0.32.0").item(Component.VLLM)
    assert item.message == "vllm 0.32.0 installed, this plugin needs vllm 0.33.0."
    assert item.fix == "pip install --no-deps vllm==0.33.0"
    assert npu(vllm=None).item(Component.VLLM).status is ItemStatus.MISSING


def test_host_with_npu_torch_names_the_cpu_wheel() -> None:
    verdict = check_compatibility(InstalledVersions("0.33.0", "2.14.0"), DeviceKind.CPU)
    item = verdict.item(Component.TORCH)
    assert item.status is ItemStatus.MISMATCH
    assert "torch 2.14.0 installed" in item.message and "torch 2.13.0" in item.message
    assert item.fix == "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"


def test_torch_npu_without_cann_on_the_host_breaks_import_torch() -> None:
    verdict = check_compatibility(
        InstalledVersions("0.33.0", "2.13.0", torch_npu="2.14.0"), DeviceKind.CPU
    )
    item = verdict.item(Component.TORCH_NPU)
    assert item.status is ItemStatus.MISMATCH
    assert "import torch" in item.message
    assert item.fix == "pip uninstall -y torch-npu"


def test_unreadable_version_is_a_mismatch_not_a_crash() -> None:
    item = npu(torch="nightly").item(Component.TORCH)
    assert item.status is ItemStatus.MISMATCH
    assert "'nightly', which is not a version number" in item.message


def test_one_problem_raises_its_compatibility_error() -> None:
    with pytest.raises(CompatibilityError) as info:
        npu(torch="2.13.0").raise_for_problems()
    assert info.value.hint == "pip install torch==2.14.0"


def test_several_problems_raise_plan_errors_listing_all() -> None:
    verdict = npu(torch="2.13.0", cann=None)
    assert [p.component for p in verdict.problems] == [Component.TORCH, Component.CANN]
    with pytest.raises(PlanErrors) as info:
        verdict.raise_for_problems()
    assert len(info.value.errors) == 2


def test_explain_shows_status_and_fix_per_component() -> None:
    text = npu(torch="2.13.0").explain()
    assert text.splitlines()[0] == "Compatibility on npu: problems"
    assert "torch: mismatch: torch 2.13.0 installed" in text
    assert "Fix: pip install torch==2.14.0" in text


def test_installed_versions_reads_the_upstream_port() -> None:
    upstream = FakeUpstream(
        {"vllm": "0.33.0", "torch": "2.14.0", "torch_npu": "2.14.0"}, cann="9.1.0"
    )
    assert installed_versions(upstream) == NPU_OK


def test_cann_version_spellings() -> None:
    assert parse_cann_version("8.3.RC1") == parse_cann_version("8.3.0rc1")
    assert parse_cann_version("garbage") is None


def test_every_device_kind_has_a_supported_set() -> None:
    assert set(SUPPORTED) == set(DeviceKind)


versions = (
    st.none()
    | st.text(max_size=30)
    | st.from_regex(r"\d{1,2}(\.\d{1,2}){0,3}(rc\d|\.RC\d|\.post\d)?", fullmatch=True)
)


@settings(max_examples=60, deadline=None)
@given(
    vllm=versions,
    torch=versions,
    torch_npu=versions,
    cann=versions,
    device=st.sampled_from(list(DeviceKind)),
)
def test_any_version_strings_give_a_verdict(
    vllm: str | None, torch: str | None, torch_npu: str | None, cann: str | None, device: DeviceKind
) -> None:
    verdict = check_compatibility(InstalledVersions(vllm, torch, torch_npu, cann), device)
    assert len(verdict.items) == len(Component)
    for item in verdict.problems:
        assert item.message and item.fix
    verdict.explain()
