"""A Report for a person: aligned columns, the fix under each problem, colour on a terminal."""

from __future__ import annotations

from collections.abc import Mapping

from adapters.doctor.report import Report
from ascend_core.preflight import CheckStatus

_COLOURS = {CheckStatus.PASS: "32", CheckStatus.WARN: "33", CheckStatus.FAIL: "31"}


def use_colour(is_tty: bool, environ: Mapping[str, str]) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set to anything non-empty."""
    return is_tty and not environ.get("NO_COLOR")


def render_text(report: Report, colour: bool = False) -> str:
    def paint(text: str, status: CheckStatus) -> str:
        return f"\033[{_COLOURS[status]}m{text}\033[0m" if colour else text

    lines: list[str] = []
    for section in report.sections:
        if not section.items:
            continue
        lines.append(section.title)
        width = max(len(i.name) for i in section.items)
        indent = " " * (2 + 6 + width + 2)
        for item in section.items:
            tag = paint(f"{item.status.value.upper():<4}", item.status)
            lines.append(f"  {tag}  {item.name:<{width}}  {item.detail}")
            if item.fix and item.status is not CheckStatus.PASS:
                lines.append(f"{indent}fix: {item.fix}")
        lines.append("")
    counts = ", ".join(f"{report.count(s)} {s.value}" for s in CheckStatus)
    verdict = paint(report.status.value.upper(), report.status)
    lines.append(f"{verdict}: {counts} (exit {report.exit_code})")
    return "\n".join(lines)
