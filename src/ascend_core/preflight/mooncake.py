"""Preflight item for Mooncake's system library: its transfer engine (the `pd` extra, P/D
disaggregation) loads libibverbs.so.1 even for TCP, and pip cannot install it."""

from __future__ import annotations

from ascend_core.preflight.items import CheckItem, CheckStatus
from ports.system_libraries import SystemLibraries
from ports.upstream import Upstream

# The distributions that bring Mooncake's transfer engine: the pd extra's host build, the
# npu extra's, and the plain (CUDA) wheel.
MOONCAKE_DISTRIBUTIONS = (
    "mooncake-transfer-engine-non-cuda",
    "mooncake-transfer-engine-npu",
    "mooncake-transfer-engine",
)
IBVERBS = "libibverbs.so.1"
IBVERBS_INSTALL = (
    "sudo apt-get install libibverbs1 (Debian, Ubuntu; Fedora, RHEL: sudo dnf install "
    "libibverbs); `make venv` cannot install it"
)
ITEM = "Mooncake system library"


def mooncake_library_items(upstream: Upstream, libraries: SystemLibraries) -> list[CheckItem]:
    """Nothing when no Mooncake transfer engine is installed; else whether the loader finds
    libibverbs.so.1, which the engine needs at import."""
    installed = [(d, v) for d in MOONCAKE_DISTRIBUTIONS if (v := upstream.version(d))]
    if not installed:
        return []
    name, version = installed[0]
    path = libraries.locate(IBVERBS)
    if path is not None:
        return [
            CheckItem(ITEM, CheckStatus.PASS, f"{IBVERBS} at {path} (needed by {name} {version})")
        ]
    return [
        CheckItem(
            ITEM,
            CheckStatus.WARN,
            f"{name} {version} is installed (the pd extra) but the loader finds no {IBVERBS}: "
            "Mooncake's transfer engine loads it even for TCP, so a P/D instance "
            "(kv_transfer_config with the Mooncake connector) fails at its start",
            IBVERBS_INSTALL,
        )
    ]
