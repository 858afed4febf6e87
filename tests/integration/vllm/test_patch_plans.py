"""The adapter's two patch plans: the device's at registration, the deployment's once known."""

from __future__ import annotations

import attrs

from adapters.vllm.patches import deployment_patch_plan, device_patch_plan
from ascend_core.deployment import SpeculativeSettings
from ports.device import ChipFamily, DeviceKind
from unit.core.plan_fixtures import host

REJECTION = {
    "host-rejection-greedy-sample-kernel",
    "host-rejection-random-sample-kernel",
    "host-rejection-expand-kernel",
    "host-rejection-recovered-tokens-kernel",
}


def test_registration_plan_is_the_devices_alone() -> None:
    ids = set(device_patch_plan(DeviceKind.CPU, ChipFamily.HOST).ids)
    assert {"host-slot-mapping-kernel", "host-shutdown-accelerator-cache"} <= ids
    assert not ids & REJECTION  # speculative decoding is a deployment fact


def test_deployment_plan_adds_what_speculative_decoding_needs() -> None:
    plain = host()
    speculative = attrs.evolve(plain, speculative=SpeculativeSettings("ngram", 3))
    assert not set(deployment_patch_plan(plain).ids) & REJECTION
    assert set(deployment_patch_plan(speculative).ids) >= REJECTION


def test_npu_plans_compute_the_slot_mapping_with_torch() -> None:
    ids = set(device_patch_plan(DeviceKind.NPU, ChipFamily.A2).ids)
    assert "host-slot-mapping-kernel" not in ids
    assert "npu-slot-mapping-kernel" in ids
    assert "npu-top-k-top-p-torch" in ids  # the sampler's torch path, not a Triton kernel
