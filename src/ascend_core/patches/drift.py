"""Drift: registered patches whose vLLM symbols are gone from the installed vLLM."""

from __future__ import annotations

from attrs import frozen

from ascend_core.patches.selection import parse_vllm_version
from ascend_core.patches.spec import PatchRegistry
from ports.upstream import Upstream


@frozen
class Drift:
    """One symbol a patch leans on that the installed vLLM does not have."""

    patch_id: str
    symbol: str
    vllm_version: str
    is_target: bool  # False: a copy listed in also_rebind

    def __str__(self) -> str:
        role = "target" if self.is_target else "rebound copy"
        return (
            f"patch {self.patch_id!r}: {role} {self.symbol} does not exist in vLLM "
            f"{self.vllm_version}; update the entry in ascend_core/patches/entries.py "
            "(new location, or narrow its version range)"
        )


def check_drift(
    registry: PatchRegistry, upstream: Upstream, vllm_version: str
) -> tuple[Drift, ...]:
    """Every missing symbol of a patch whose version range admits `vllm_version`.

    The deployment condition is ignored: a patch needed only on some devices must
    still find its target on every one.
    """
    version = parse_vllm_version(vllm_version)
    drifts = []
    for spec in registry:
        if not spec.versions.admits(version):
            continue
        for symbol in spec.symbols():
            if not upstream.has_symbol(symbol):
                drifts.append(Drift(spec.id, symbol, vllm_version, symbol == spec.target))
    return tuple(drifts)
