"""The adapter's two patch plans: the device's at registration, the deployment's once known."""

from __future__ import annotations

import attrs

from adapters.vllm.patches import deployment_patch_plan, device_patch_plan
from ascend_core.deployment import SpeculativeSettings
from ports.device import ChipFamily, DeviceKind
from unit.core.plan_fixtures import host


def test_registration_plan_is_the_devices_alone() -> None:
    ids = set(device_patch_plan(DeviceKind.CPU, ChipFamily.HOST).ids)
    assert {"host-slot-mapping-kernel", "host-shutdown-accelerator-cache"} <= ids


def test_speculative_decoding_adds_the_rejection_sampler_patches_and_only_those() -> None:
    # The registration plan has no deployment; the deployment's adds vLLM's rejection
    # sampler on the RejectionOps port (its rejection_sample rebound, its expand kernel
    # overridden; ngram is served on the host), and the draft-model proposers' input
    # kernels onto DraftInputOps.
    plain = host()
    speculative = attrs.evolve(plain, speculative=SpeculativeSettings("ngram", 3))
    added = set(deployment_patch_plan(speculative).ids) - set(deployment_patch_plan(plain).ids)
    assert added == {
        "spec-rejection-sample-torch", "spec-expand-kernel-torch",
        "spec-draft-step-slots-torch", "spec-draft-sample-indices-torch",
        "spec-draft-next-token-torch", "spec-draft-expand-inputs-torch",
    }
    assert not added & set(device_patch_plan(DeviceKind.CPU, ChipFamily.HOST).ids)


def test_npu_plans_compute_the_slot_mapping_with_torch() -> None:
    ids = set(device_patch_plan(DeviceKind.NPU, ChipFamily.A2).ids)
    assert "host-slot-mapping-kernel" not in ids
    assert "npu-slot-mapping-kernel" in ids
    assert "npu-top-k-top-p-torch" in ids  # the sampler's torch path, not a Triton kernel
