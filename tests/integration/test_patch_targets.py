"""Every vLLM symbol the patch registry leans on exists in the installed vLLM."""

from __future__ import annotations

import pytest

from adapters.system import MetadataUpstream
from ascend_core.patches import REGISTRY, check_drift, parse_vllm_version

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def upstream() -> MetadataUpstream:
    return MetadataUpstream()


@pytest.fixture(scope="module")
def vllm_version(upstream: MetadataUpstream) -> str:
    version = upstream.version("vllm")
    assert version is not None, "vLLM is not installed in this environment"
    return version


def test_every_entry_is_written_for_the_installed_vllm(vllm_version: str) -> None:
    installed = parse_vllm_version(vllm_version)
    stale = [s.id for s in REGISTRY if not s.versions.admits(installed)]
    assert stale == [], f"entries not written for vLLM {vllm_version}: {stale}"


def test_no_patch_target_has_drifted(upstream: MetadataUpstream, vllm_version: str) -> None:
    drifts = check_drift(REGISTRY, upstream, vllm_version)
    assert drifts == (), "\n".join(str(d) for d in drifts)


def test_the_check_sees_a_missing_symbol(upstream: MetadataUpstream) -> None:
    # Guards the test above against a has_symbol that answers True to everything.
    assert not upstream.has_symbol("vllm.v1.worker.block_table:ComputeSlotMappingKernel.gone")
