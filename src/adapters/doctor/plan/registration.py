"""The `registration` item: which model class serves the architecture, and why."""

from __future__ import annotations

from typing import Any

from adapters.doctor.plan.items import PASS
from ascend_core.model_registry import registration_for, unregistered_note
from ascend_core.preflight import CheckItem


def registration_item(architecture: str) -> tuple[CheckItem, dict[str, Any] | None]:
    """The table's row as an item (the matrix's own items say whether it serves), and as data."""
    row = registration_for(architecture)
    if row is None:
        return CheckItem("registration", PASS, unregistered_note(architecture)), None
    where = row.implementation or f"model class (the vLLM adapter's for {row.architecture})"
    detail = f"{row.implementation_kind.value} {where}: {row.why}"
    return CheckItem("registration", PASS, detail), row.describe()
