"""Preflight items for the Python version and the installed upstream versions."""

from __future__ import annotations

from ascend_core.compatibility import CompatibilityItem
from ascend_core.preflight.items import CheckItem, CheckStatus
from ascend_core.versions import Version, VersionRange

# vLLM 0.33.0's Requires-Python.
SUPPORTED_PYTHON = VersionRange.parse(">=3.11,<3.15")


def python_item(version: str) -> CheckItem:
    parsed = Version.parse(version)
    if parsed is not None and SUPPORTED_PYTHON.admits(parsed):
        return CheckItem("python", CheckStatus.PASS, f"Python {version}")
    return CheckItem(
        "python",
        CheckStatus.FAIL,
        f"Python {version}; vLLM 0.33.0 needs Python {SUPPORTED_PYTHON}",
        "create the environment with Python 3.11 or 3.12 (e.g. `python3.11 -m venv .venv`)",
    )


def compatibility_item(item: CompatibilityItem) -> CheckItem:
    status = CheckStatus.FAIL if item.is_problem else CheckStatus.PASS
    fix = item.fix if item.is_problem else ""
    name = item.component.value
    return CheckItem(name, status, item.message, fix)
