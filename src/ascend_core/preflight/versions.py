"""Preflight items for the Python version and the installed upstream versions."""

from __future__ import annotations

from ascend_core.compatibility import CompatibilityItem
from ascend_core.preflight.items import CheckItem, CheckStatus
from ascend_core.versions import Version, VersionRange

# torch release -> the torchvision release built for it (torchvision's compatibility table);
# scripts/install_torchvision.py installs from this table.
TORCHVISION_FOR_TORCH = {"2.13": "0.28.0", "2.14": "0.29.0"}
TORCHVISION_INSTALL = ".venv/bin/python scripts/install_torchvision.py (`make venv` runs it)"

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


def _release(version: str) -> str:
    """`2.13.0+cpu` -> `2.13`; `0.28.0+cu130` -> `0.28`."""
    return ".".join(version.split("+")[0].split(".")[:2])


def paired_torchvision(torch_version: str) -> str | None:
    """The torchvision release built for this torch, None when the table has no pairing."""
    return TORCHVISION_FOR_TORCH.get(_release(torch_version))


def torchvision_item(torch_version: str | None, torchvision_version: str | None) -> CheckItem:
    """torchvision: vLLM's vision-language and Qwen3.5 modules import it; text models don't."""
    wanted = paired_torchvision(torch_version) if torch_version else None
    if torchvision_version is None:
        return CheckItem(
            "torchvision",
            CheckStatus.WARN,
            "torchvision is not installed: text models serve without it, but vLLM's "
            "vision-language and Qwen3.5 modules import it, so those models cannot even be "
            "inspected",
            TORCHVISION_INSTALL,
        )
    if wanted is not None and _release(torchvision_version) != _release(wanted):
        return CheckItem(
            "torchvision",
            CheckStatus.FAIL,
            f"torchvision {torchvision_version} installed, but torch {torch_version} pairs "
            f"with torchvision {wanted}: its operator library does not load with this torch, "
            "so `import torchvision` fails",
            TORCHVISION_INSTALL,
        )
    return CheckItem("torchvision", CheckStatus.PASS, f"torchvision {torchvision_version}")
