"""Preflight items for CANN: its environment sourced and its libraries loadable."""

from __future__ import annotations

from collections.abc import Mapping

from ascend_core.preflight.items import CheckItem, CheckStatus
from ports.environment import Environment
from ports.upstream import Upstream

SOURCE_CANN = "source /usr/local/Ascend/ascend-toolkit/set_env.sh (or your install's set_env.sh)"


def cann_sourced_item(env: Environment, upstream: Upstream) -> CheckItem:
    home = env.get("ASCEND_HOME_PATH")
    version = upstream.cann_version()
    if home and version:
        return CheckItem(
            "CANN environment", CheckStatus.PASS, f"ASCEND_HOME_PATH={home} (CANN {version})"
        )
    if home:
        return CheckItem(
            "CANN environment",
            CheckStatus.FAIL,
            f"ASCEND_HOME_PATH={home}, but no CANN install info (version) was found there",
            f"point ASCEND_HOME_PATH at the toolkit: {SOURCE_CANN}",
        )
    if version:
        return CheckItem(
            "CANN environment",
            CheckStatus.FAIL,
            f"CANN {version} is installed but its environment is not sourced "
            "(ASCEND_HOME_PATH unset); vLLM then fails with 'Failed to infer device type'",
            SOURCE_CANN,
        )
    return CheckItem(
        "CANN environment",
        CheckStatus.FAIL,
        "no CANN toolkit found and ASCEND_HOME_PATH unset",
        f"install the CANN toolkit for your chip, then {SOURCE_CANN}",
    )


def cann_libraries_item(env: Environment, found: Mapping[str, str | None]) -> CheckItem:
    if not found:
        return CheckItem("CANN libraries", CheckStatus.WARN, "not looked for", "")
    missing = sorted(lib for lib, path in found.items() if path is None)
    if missing:
        return CheckItem(
            "CANN libraries",
            CheckStatus.FAIL,
            f"{', '.join(missing)} not found in LD_LIBRARY_PATH or $ASCEND_HOME_PATH/lib64",
            f"install the CANN toolkit, then {SOURCE_CANN}",
        )
    loader_dirs = {d.rstrip("/") for d in (env.get("LD_LIBRARY_PATH") or "").split(":") if d}
    # Found only through ASCEND_HOME_PATH: the dynamic loader searches LD_LIBRARY_PATH,
    # so torch_npu would still fail to load them.
    outside = sorted(
        path for path in found.values() if path and path.rsplit("/", 1)[0] not in loader_dirs
    )
    if outside:
        return CheckItem(
            "CANN libraries",
            CheckStatus.WARN,
            f"{', '.join(outside)} exist but their directory is not in LD_LIBRARY_PATH",
            SOURCE_CANN,
        )
    return CheckItem(
        "CANN libraries",
        CheckStatus.PASS,
        ", ".join(str(p) for p in found.values()),
    )
