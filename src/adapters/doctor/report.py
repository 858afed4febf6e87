"""What a doctor command found: titled sections of check items, plus numbers for tools."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attrs import field, frozen

from ascend_core.preflight import CheckItem, CheckStatus, worst

# The exit status of each overall verdict: 0 all good, 1 warnings only, 2 failures.
EXIT_CODES: Mapping[CheckStatus, int] = {
    CheckStatus.PASS: 0,
    CheckStatus.WARN: 1,
    CheckStatus.FAIL: 2,
}


@frozen
class Section:
    """A group of items under one heading."""

    title: str
    items: tuple[CheckItem, ...] = field(converter=tuple)


@frozen
class Report:
    """One command's result; `data` carries the structured numbers (memory budget, plan)."""

    command: str
    sections: tuple[Section, ...] = field(converter=tuple)
    data: Mapping[str, Any] = field(factory=dict)

    @property
    def status(self) -> CheckStatus:
        return worst(i.status for s in self.sections for i in s.items)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    def count(self, status: CheckStatus) -> int:
        return sum(1 for s in self.sections for i in s.items if i.status is status)
