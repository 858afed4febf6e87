"""The README's support-matrix table says what the matrix says, feature by feature."""

from __future__ import annotations

import re
from pathlib import Path

from ascend_core.support import Feature, Supported, verdict
from ports.device import DeviceKind

README = Path(__file__).resolve().parents[3] / "README.md"


def _table() -> dict[str, tuple[str, str]]:
    text = README.read_text()
    section = text.split("\n## What this build serves", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1] in ("yes", "refused"):
            rows[cells[0]] = (cells[1], cells[2])
    return rows


def test_every_feature_has_a_row_that_matches_the_matrix() -> None:
    rows = _table()
    for feature in Feature:
        expected = tuple(
            "yes" if isinstance(verdict(feature, d), Supported) else "refused"
            for d in (DeviceKind.CPU, DeviceKind.NPU)
        )
        assert rows.get(feature.value) == expected, feature
    assert len(rows) == len(Feature) + 1  # plus the dense-model row
    assert re.search(r"dense MHA/GQA", " ".join(rows)), rows
