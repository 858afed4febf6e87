"""docs/design.md lists every registered patch, each with how it reaches vLLM and the vLLM
seam that would retire it, and nothing the registry does not hold."""

from __future__ import annotations

import re
from pathlib import Path

from ascend_core.patches import REGISTRY

DESIGN = Path(__file__).resolve().parents[3] / "docs" / "design.md"


def test_the_design_docs_patch_table_is_the_registry() -> None:
    section = DESIGN.read_text().split("\n## Upstream patches\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if re.match(r"^\| `[a-z0-9-]+` \|", line)]
    listed = [row.split("`")[1] for row in rows]
    assert sorted(listed) == sorted(spec.id for spec in REGISTRY)
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 3 and all(cells), row
        assert cells[1].startswith("patch") == (not cells[2].startswith("none")), row
