"""The real registry: shape of every entry, and the plan it gives for the host and an NPU."""

from __future__ import annotations

import re

from ascend_core.patches import REGISTRY, Feature, PatchContext, Version, plan_patches
from ports.device import ChipFamily, DeviceKind

PINNED_VLLM = Version.parse("0.33.0")


def test_every_entry_is_complete_and_covers_the_pinned_vllm() -> None:
    assert len(REGISTRY) > 0
    for spec in REGISTRY:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", spec.id), spec.id
        assert spec.reason.endswith("."), spec.id
        assert len(spec.reason) < 400, spec.id
        assert PINNED_VLLM is not None and spec.versions.admits(PINNED_VLLM), spec.id


def test_host_without_triton_gets_slot_mapping_and_shutdown_patches() -> None:
    plan = plan_patches(REGISTRY, PatchContext(DeviceKind.CPU, ChipFamily.HOST), "0.33.0")
    assert "host-slot-mapping-kernel" in plan.ids
    assert "host-shutdown-accelerator-cache" in plan.ids


def test_npu_deployment_gets_none_of_the_host_patches() -> None:
    context = PatchContext(DeviceKind.NPU, ChipFamily.A2, {Feature.TRITON})
    assert not any(i.startswith("host-") for i in plan_patches(REGISTRY, context, "0.33.0").ids)


def test_next_vllm_minor_skips_every_entry_for_review() -> None:
    plan = plan_patches(REGISTRY, PatchContext(DeviceKind.CPU, ChipFamily.HOST), "0.34.0")
    assert plan.to_apply == ()
