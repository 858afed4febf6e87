"""plan_patches and check_drift over small hand-made registries."""

from __future__ import annotations

import pytest

from ascend_core.errors import CompatibilityError
from ascend_core.patches import (
    ALWAYS,
    Condition,
    Feature,
    PatchContext,
    PatchRegistry,
    PatchSpec,
    SkipCause,
    check_drift,
    plan_patches,
)
from ports.device import ChipFamily, DeviceKind
from unit.fakes.upstream import FakeUpstream

HOST = PatchContext(DeviceKind.CPU, ChipFamily.HOST)
HOST_TRITON = PatchContext(DeviceKind.CPU, ChipFamily.HOST, {Feature.TRITON})
A2 = PatchContext(DeviceKind.NPU, ChipFamily.A2, {Feature.TRITON})


def spec(
    id: str,
    *,
    target: str = "vllm.mod:Thing.method",
    versions: str = ">=0.33.0,<0.34",
    when: Condition = ALWAYS,
    also: tuple[str, ...] = (),
) -> PatchSpec:
    return PatchSpec(
        id=id,
        target=target,
        versions=versions,
        when=when,
        reason=f"{id} is needed.",
        also_rebind=also,
    )


REGISTRY = PatchRegistry(
    [
        spec("always"),
        spec("host-only", when=Condition(device_kinds={DeviceKind.CPU})),
        spec("no-triton", when=Condition(device_kinds={DeviceKind.CPU}, excludes={Feature.TRITON})),
        spec("spec-decode", when=Condition(requires={Feature.SPECULATIVE_DECODING})),
        spec("a3-only", when=Condition(chip_families={ChipFamily.A3})),
        spec("old", versions="<0.33"),
    ]
)


def test_plan_lists_what_applies_in_registry_order_with_reasons() -> None:
    plan = plan_patches(REGISTRY, HOST, "0.33.0")
    assert plan.ids == ("always", "host-only", "no-triton")
    assert all(p.why.startswith(f"{p.spec.id} is needed.") for p in plan.to_apply)
    assert "device in {cpu}" in plan.to_apply[1].why


def test_an_unconditional_patch_says_it_is_needed_everywhere() -> None:
    why = {p.spec.id: p.why for p in plan_patches(REGISTRY, HOST, "0.33.0").to_apply}
    assert why["always"].endswith("(needed on every deployment)")
    assert why["host-only"].endswith("(needed when device in {cpu})")


def test_plan_says_why_each_skipped_patch_is_skipped() -> None:
    plan = plan_patches(REGISTRY, HOST, "0.33.0")
    skipped = {s.spec.id: s for s in plan.skipped}
    assert set(skipped) == {"spec-decode", "a3-only", "old"}
    assert skipped["old"].cause is SkipCause.VERSION
    assert "<0.33" in skipped["old"].why and "0.33.0" in skipped["old"].why
    assert skipped["spec-decode"].cause is SkipCause.CONDITION
    assert "speculative_decoding" in skipped["spec-decode"].why
    assert "chip family is host, needed on A3" in skipped["a3-only"].why


def test_excluded_feature_skips_the_patch() -> None:
    plan = plan_patches(REGISTRY, HOST_TRITON, "0.33.0")
    assert "no-triton" not in plan.ids
    why = next(s.why for s in plan.skipped if s.spec.id == "no-triton")
    assert "not needed when triton is available" in why


def test_npu_context_skips_host_patches_naming_the_device() -> None:
    plan = plan_patches(REGISTRY, A2, "0.33.0")
    assert plan.ids == ("always",)
    why = next(s.why for s in plan.skipped if s.spec.id == "host-only")
    assert "device is npu, needed on cpu" in why


def test_every_patch_is_either_applied_or_skipped() -> None:
    plan = plan_patches(REGISTRY, A2, "0.34.0")
    assert len(plan.to_apply) + len(plan.skipped) == len(REGISTRY)
    assert plan.to_apply == ()


def test_explain_has_one_line_per_patch() -> None:
    text = plan_patches(REGISTRY, HOST, "0.33.0").explain()
    lines = text.splitlines()
    assert lines[0].startswith("Patches for vLLM 0.33.0 on cpu (host): 3 to apply, 3 skipped")
    assert len(lines) == 1 + len(REGISTRY)


def test_unreadable_vllm_version_is_a_compatibility_error() -> None:
    with pytest.raises(CompatibilityError) as info:
        plan_patches(REGISTRY, HOST, "main-branch")
    assert "'main-branch'" in info.value.what
    assert "vllm==0.33.0" in info.value.hint


def test_drift_reports_missing_targets_and_copies_naming_the_patch() -> None:
    registry = PatchRegistry(
        [
            spec("present", target="vllm.a:f"),
            spec("gone", target="vllm.b:g", also=("vllm.c:g",)),
            spec("copy-gone", target="vllm.a:f", also=("vllm.d:f",)),
            spec("other-version", target="vllm.zzz:h", versions="<0.30"),
        ]
    )
    upstream = FakeUpstream(symbols={"vllm.a:f", "vllm.c:g"})
    drifts = check_drift(registry, upstream, "0.33.0")
    assert [(d.patch_id, d.symbol, d.is_target) for d in drifts] == [
        ("gone", "vllm.b:g", True),
        ("copy-gone", "vllm.d:f", False),
    ]
    assert "patch 'gone': target vllm.b:g does not exist in vLLM 0.33.0" in str(drifts[0])
    assert "vllm.zzz:h" not in upstream.asked  # other versions are not checked


def test_drift_ignores_conditions() -> None:
    registry = PatchRegistry(
        [spec("a3", target="vllm.x:y", when=Condition(chip_families={ChipFamily.A3}))]
    )
    assert len(check_drift(registry, FakeUpstream(), "0.33.0")) == 1


def test_no_drift_when_everything_exists() -> None:
    registry = PatchRegistry([spec("p", target="vllm.a:f")])
    assert check_drift(registry, FakeUpstream(symbols={"vllm.a:f"}), "0.33.0") == ()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("target", "torch.cuda:empty_cache"),
        ("target", "vllm.module.Thing"),
        ("target", "vllm.mod:"),
        ("versions", "0.33"),
        ("also_rebind", ("no colon",)),
    ],
)
def test_malformed_spec_is_refused(field: str, value: object) -> None:
    kwargs: dict[str, object] = {
        "id": "x",
        "target": "vllm.mod:f",
        "versions": ">=0.33",
        "when": ALWAYS,
        "reason": "r",
        field: value,
    }
    with pytest.raises(ValueError):
        PatchSpec(**kwargs)  # type: ignore[arg-type]


def test_duplicate_ids_are_refused() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        PatchRegistry([spec("same"), spec("same")])


def test_condition_describe() -> None:
    condition = Condition(device_kinds={DeviceKind.CPU}, excludes={Feature.TRITON})
    assert condition.describe() == "device in {cpu} and without triton"
    assert ALWAYS.describe() == "always"
    assert ALWAYS.unmet(A2) == ()
