"""Check-item helpers every plan section shares."""

from __future__ import annotations

from ascend_core.errors import AscendError, PlanErrors
from ascend_core.preflight import CheckItem, CheckStatus

PASS, WARN, FAIL = CheckStatus.PASS, CheckStatus.WARN, CheckStatus.FAIL


def _errors(error: AscendError) -> tuple[AscendError, ...]:
    return error.errors if isinstance(error, PlanErrors) else (error,)


def failed(name: str, error: AscendError) -> list[CheckItem]:
    """One FAIL item per error the core raised (a PlanErrors holds several)."""
    return [CheckItem(name, FAIL, e.what, e.hint) for e in _errors(error)]
