"""Text and JSON rendering of a report, colour rules and exit codes."""

from __future__ import annotations

import json

from adapters.doctor.render_json import render_json
from adapters.doctor.render_text import render_text, use_colour
from adapters.doctor.report import Report, Section
from ascend_core.preflight import CheckItem, CheckStatus

REPORT = Report(
    "check",
    [
        Section(
            "versions",
            [
                CheckItem("python", CheckStatus.PASS, "Python 3.11.7"),
                CheckItem("torch_npu", CheckStatus.FAIL, "not installed", "pip install torch-npu"),
            ],
        ),
        Section("variables", [CheckItem("VLLM_ASCEND_X", CheckStatus.WARN, "unknown", "unset")]),
        Section("empty", []),
    ],
)


def test_exit_code_follows_the_worst_item() -> None:
    assert REPORT.exit_code == 2
    warn_only = Report("check", [Section("s", [CheckItem("a", CheckStatus.WARN, "w")])])
    assert warn_only.exit_code == 1
    assert Report("check", [Section("s", [CheckItem("a", CheckStatus.PASS, "ok")])]).exit_code == 0


def test_text_is_aligned_and_fixes_sit_under_problems() -> None:
    lines = render_text(REPORT).splitlines()
    assert lines[0] == "versions"
    assert lines[1] == "  PASS  python     Python 3.11.7"
    assert lines[2] == "  FAIL  torch_npu  not installed"
    assert lines[3] == "                   fix: pip install torch-npu"
    assert "empty" not in lines
    assert lines[-1] == "FAIL: 1 pass, 1 warn, 1 fail (exit 2)"
    assert "\033[" not in "\n".join(lines)


def test_colour_only_on_a_terminal_without_no_color() -> None:
    assert use_colour(True, {})
    assert not use_colour(False, {})
    assert not use_colour(True, {"NO_COLOR": "1"})
    assert use_colour(True, {"NO_COLOR": ""})  # no-color.org: empty means unset
    coloured = render_text(REPORT, colour=True)
    assert "\033[31mFAIL\033[0m" in coloured and "\033[32mPASS\033[0m" in coloured


def test_json_has_every_item_and_the_verdict() -> None:
    data = json.loads(render_json(REPORT))
    assert data["status"] == "fail" and data["exit_code"] == 2
    assert data["counts"] == {"pass": 1, "warn": 1, "fail": 1}
    assert data["sections"][0]["items"][1] == {
        "name": "torch_npu",
        "status": "fail",
        "detail": "not installed",
        "fix": "pip install torch-npu",
    }
