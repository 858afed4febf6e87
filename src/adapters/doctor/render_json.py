"""A Report as JSON for tools: every item, the verdict, the exit code and the numbers."""

from __future__ import annotations

import json
from typing import Any

from adapters.doctor.report import Report
from ascend_core.preflight import CheckStatus


def to_dict(report: Report) -> dict[str, Any]:
    return {
        "command": report.command,
        "status": report.status.value,
        "exit_code": report.exit_code,
        "counts": {s.value: report.count(s) for s in CheckStatus},
        "sections": [
            {
                "title": section.title,
                "items": [
                    {
                        "name": item.name,
                        "status": item.status.value,
                        "detail": item.detail,
                        "fix": item.fix,
                    }
                    for item in section.items
                ],
            }
            for section in report.sections
        ],
        "data": dict(report.data),
    }


def render_json(report: Report) -> str:
    return json.dumps(to_dict(report), indent=2, sort_keys=False, default=str)
