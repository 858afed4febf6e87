"""`ascend-doctor check`: Mooncake's system library (libibverbs.so.1), reported when the
pd extra's transfer engine is installed, through the SystemLibraries port (fakes here)."""

from __future__ import annotations

import pytest

from ascend_core.preflight.items import CheckStatus
from ascend_core.preflight.mooncake import IBVERBS, mooncake_library_items
from unit.fakes.system_libraries import FakeSystemLibraries
from unit.fakes.upstream import FakeUpstream


def test_nothing_is_said_or_looked_for_without_mooncake() -> None:
    libraries = FakeSystemLibraries()
    assert mooncake_library_items(FakeUpstream({"vllm": "0.33.0"}), libraries) == []
    assert libraries.asked == []


@pytest.mark.parametrize(
    "distribution", ["mooncake-transfer-engine-non-cuda", "mooncake-transfer-engine-npu"]
)
def test_a_missing_libibverbs_is_a_warning_with_the_apt_command(distribution: str) -> None:
    libraries = FakeSystemLibraries()
    (item,) = mooncake_library_items(FakeUpstream({distribution: "0.3.13"}), libraries)
    assert libraries.asked == [IBVERBS]
    assert item.status is CheckStatus.WARN
    assert f"{distribution} 0.3.13" in item.detail and "libibverbs.so.1" in item.detail
    assert "apt-get install libibverbs1" in item.fix


def test_a_found_libibverbs_passes_with_its_path() -> None:
    libraries = FakeSystemLibraries({IBVERBS: "/usr/lib/x86_64-linux-gnu/libibverbs.so.1"})
    upstream = FakeUpstream({"mooncake-transfer-engine-non-cuda": "0.3.13"})
    (item,) = mooncake_library_items(upstream, libraries)
    assert item.status is CheckStatus.PASS
    assert "/usr/lib/x86_64-linux-gnu/libibverbs.so.1" in item.detail
