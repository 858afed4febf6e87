"""Which registered patches a deployment needs, and why each of the others is left out."""

from __future__ import annotations

import enum

from attrs import frozen

from ascend_core.errors import CompatibilityError
from ascend_core.patches.spec import ALWAYS, Condition, PatchContext, PatchRegistry, PatchSpec
from ascend_core.versions import Version


class SkipCause(enum.Enum):
    """Why a registered patch is not applied."""

    VERSION = "version"  # written for other vLLM versions
    CONDITION = "condition"  # this deployment does not need it


@frozen
class PlannedPatch:
    """A patch to apply, with the reason it is needed here."""

    spec: PatchSpec
    why: str


@frozen
class SkippedPatch:
    """A patch left out, with the cause and the details."""

    spec: PatchSpec
    cause: SkipCause
    why: str


@frozen
class PatchPlan:
    """The patches to apply for one deployment and vLLM version, and the ones skipped."""

    vllm_version: str
    context: PatchContext
    to_apply: tuple[PlannedPatch, ...]
    skipped: tuple[SkippedPatch, ...]

    @property
    def ids(self) -> tuple[str, ...]:
        """The ids of the patches to apply, in registry order."""
        return tuple(p.spec.id for p in self.to_apply)

    def explain(self) -> str:
        """The plan as lines a log or `ascend-doctor` can print."""
        lines = [
            f"Patches for vLLM {self.vllm_version} on {self.context.device_kind.value} "
            f"({self.context.chip_family.value}): {len(self.to_apply)} to apply, "
            f"{len(self.skipped)} skipped."
        ]
        lines += [f"  apply {p.spec.id}: {p.why}" for p in self.to_apply]
        lines += [f"  skip {s.spec.id} ({s.cause.value}): {s.why}" for s in self.skipped]
        return "\n".join(lines)


def parse_vllm_version(vllm_version: str) -> Version:
    """The installed vLLM version, or a CompatibilityError saying it cannot be read."""
    parsed = Version.parse(vllm_version)
    if parsed is None:
        raise CompatibilityError(
            f"vLLM reports version {vllm_version!r}, which is not a version number, "
            "so no upstream patch can be matched to it.",
            "Install a released vLLM: pip install --no-deps vllm==0.33.0",
        )
    return parsed


def plan_patches(
    registry: PatchRegistry, context: PatchContext, vllm_version: str
) -> PatchPlan:
    """Every registered patch, either to apply (version and condition hold) or skipped (why)."""
    version = parse_vllm_version(vllm_version)
    to_apply: list[PlannedPatch] = []
    skipped: list[SkippedPatch] = []
    for spec in registry:
        if not spec.versions.admits(version):
            skipped.append(
                SkippedPatch(
                    spec,
                    SkipCause.VERSION,
                    f"written for vLLM {spec.versions}, installed is {vllm_version}",
                )
            )
            continue
        unmet = spec.when.unmet(context)
        if unmet:
            skipped.append(SkippedPatch(spec, SkipCause.CONDITION, "; ".join(unmet)))
            continue
        to_apply.append(PlannedPatch(spec, f"{spec.reason} ({_when(spec.when)})"))
    return PatchPlan(vllm_version, context, tuple(to_apply), tuple(skipped))


def _when(condition: Condition) -> str:
    """Why the patch applies here, in words: a patch with no condition is needed everywhere."""
    if condition == ALWAYS:
        return "needed on every deployment"
    return f"needed when {condition.describe()}"
