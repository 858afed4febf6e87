"""One upstream patch as data: what it replaces, for which vLLM, when, why, who applies it."""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Iterator

from attrs import field, frozen

from ascend_core.versions import VersionRange, to_range
from ports.device import ChipFamily, DeviceKind


class Feature(enum.Enum):
    """Facts of a deployment that decide whether a patch is needed."""

    TRITON = "triton"  # Triton can compile kernels for the serving device
    SPECULATIVE_DECODING = "speculative_decoding"  # a draft model or n-gram proposer is set
    MAMBA_STATE = "mamba_state"  # the model keeps Mamba/linear-attention state in the KV cache
    KV_TRANSFER = "kv_transfer"  # a KV connector moves the cache (prefill/decode roles)
    RAY = "ray"  # the workers run on a Ray cluster (--distributed-executor-backend ray)
    EPLB = "eplb"  # vLLM's expert-parallel load balancing (--enable-eplb)


def _features(values: Iterable[Feature]) -> frozenset[Feature]:
    return frozenset(values)


@frozen
class PatchContext:
    """What the planner knows about one deployment."""

    device_kind: DeviceKind
    chip_family: ChipFamily
    features: frozenset[Feature] = field(default=frozenset(), converter=_features)


def _kinds(values: Iterable[DeviceKind]) -> frozenset[DeviceKind]:
    return frozenset(values)


def _families(values: Iterable[ChipFamily]) -> frozenset[ChipFamily]:
    return frozenset(values)


def _strings(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


def _specs(values: Iterable[PatchSpec]) -> tuple[PatchSpec, ...]:
    return tuple(values)


def _names(values: Iterable[enum.Enum]) -> str:
    return ", ".join(sorted(str(v.value) for v in values))


@frozen
class Condition:
    """When a patch is needed; an empty set places no constraint. All parts must hold."""

    device_kinds: frozenset[DeviceKind] = field(default=frozenset(), converter=_kinds)
    chip_families: frozenset[ChipFamily] = field(default=frozenset(), converter=_families)
    requires: frozenset[Feature] = field(default=frozenset(), converter=_features)
    excludes: frozenset[Feature] = field(default=frozenset(), converter=_features)

    def unmet(self, context: PatchContext) -> tuple[str, ...]:
        """Each part of the condition that `context` fails, as a sentence; empty when met."""
        reasons = []
        if self.device_kinds and context.device_kind not in self.device_kinds:
            reasons.append(
                f"device is {context.device_kind.value}, needed on {_names(self.device_kinds)}"
            )
        if self.chip_families and context.chip_family not in self.chip_families:
            reasons.append(
                f"chip family is {context.chip_family.value}, "
                f"needed on {_names(self.chip_families)}"
            )
        missing = self.requires - context.features
        if missing:
            reasons.append(f"needs {_names(missing)}, which this deployment does not use")
        present = self.excludes & context.features
        if present:
            reasons.append(f"not needed when {_names(present)} is available")
        return tuple(reasons)

    def describe(self) -> str:
        """The condition in words, for plans and docs."""
        parts = []
        if self.device_kinds:
            parts.append(f"device in {{{_names(self.device_kinds)}}}")
        if self.chip_families:
            parts.append(f"chip family in {{{_names(self.chip_families)}}}")
        if self.requires:
            parts.append(f"with {_names(self.requires)}")
        if self.excludes:
            parts.append(f"without {_names(self.excludes)}")
        return " and ".join(parts) if parts else "always"


ALWAYS = Condition()

# `package.module:Attr.sub`: a module path, a colon, then an attribute path.
_SYMBOL = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def _check_symbol(_: object, attribute: object, value: str) -> None:
    if not _SYMBOL.match(value):
        raise ValueError(f"{value!r} is not a 'package.module:Attr.sub' symbol")


def _check_symbols(instance: object, attribute: object, values: tuple[str, ...]) -> None:
    for value in values:
        _check_symbol(instance, attribute, value)


def _check_vllm(_: object, attribute: object, value: str) -> None:
    if not value.startswith("vllm.") and not value.startswith("vllm:"):
        raise ValueError(f"patch target {value!r} is not a vLLM symbol")


@frozen
class PatchSpec:
    """One upstream patch, declared as data: what the core decides about vLLM. The function
    that applies it lives in the vLLM adapter's table, found by `id`.

    target: the vLLM symbol replaced, `vllm.module:Attr.sub`.
    versions: the vLLM versions the patch is written for.
    when: the deployments that need it.
    reason: one sentence: what breaks without it.
    also_rebind: other module attributes that hold the same object (`from x import f` copies)
        and must point at the replacement too; the drift check covers them.
    """

    id: str
    target: str = field(validator=[_check_symbol, _check_vllm])
    versions: VersionRange = field(converter=to_range)
    when: Condition
    reason: str
    also_rebind: tuple[str, ...] = field(
        default=(), converter=_strings, validator=_check_symbols
    )

    def symbols(self) -> tuple[str, ...]:
        """Every vLLM symbol this patch leans on."""
        return (self.target, *self.also_rebind)


@frozen
class PatchRegistry:
    """The patches the plugin knows, with unique ids."""

    entries: tuple[PatchSpec, ...] = field(converter=_specs)

    def __attrs_post_init__(self) -> None:
        seen: set[str] = set()
        for spec in self.entries:
            if spec.id in seen:
                raise ValueError(f"patch id {spec.id!r} is declared twice")
            seen.add(spec.id)

    def get(self, patch_id: str) -> PatchSpec | None:
        return next((s for s in self.entries if s.id == patch_id), None)

    def __iter__(self) -> Iterator[PatchSpec]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)
