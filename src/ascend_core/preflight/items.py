"""Check items and their verdicts: pass, warn or fail, and the worst of several."""

from __future__ import annotations

import enum
from collections.abc import Iterable

from attrs import frozen


class CheckStatus(enum.Enum):
    """The verdict of one check; ordered from good to bad."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {CheckStatus.PASS: 0, CheckStatus.WARN: 1, CheckStatus.FAIL: 2}


@frozen
class CheckItem:
    """One check: what was looked at, the verdict, what was found, and the fix (if any)."""

    name: str
    status: CheckStatus
    detail: str
    fix: str = ""


def worst(statuses: Iterable[CheckStatus]) -> CheckStatus:
    """The worst of `statuses`; PASS for none."""
    return max(statuses, key=lambda s: s.rank, default=CheckStatus.PASS)


@frozen
class Preflight:
    """Every check item, in the order an operator should read them."""

    items: tuple[CheckItem, ...]

    @property
    def status(self) -> CheckStatus:
        return worst(i.status for i in self.items)

    def count(self, status: CheckStatus) -> int:
        return sum(1 for i in self.items if i.status is status)
