"""Every VLLM_ASCEND_* name written in src/ is registered in ascend_core.env_registry."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from ascend_core.env_registry import ENV_REGISTRY, RETIRED_VARS
from support.parsed_sources import syntax_nodes

SRC = Path(__file__).resolve().parents[3] / "src"
NAME = re.compile(r"^VLLM_ASCEND_[A-Z0-9_]+$")
# Retired names may be written only where the registry lists them as retired.
RETIRED_MAY_APPEAR_IN = ("ascend_core/env_registry.py", "ascend_core/env/reference_vars.py")


def unregistered_names(root: Path) -> list[str]:
    """'path: NAME' for every VLLM_ASCEND_* string constant under root that is not registered."""
    retired = {r.name for r in RETIRED_VARS}
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for node in syntax_nodes(path):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            name = node.value
            if not NAME.match(name) or name in ENV_REGISTRY:
                continue
            if name in retired and rel in RETIRED_MAY_APPEAR_IN:
                continue
            found.append(f"{rel}:{node.lineno}: {name}")
    return found


def test_every_variable_read_in_src_is_registered():
    problems = unregistered_names(SRC)
    assert not problems, (
        "VLLM_ASCEND_* names used in src/ but not registered in "
        "src/ascend_core/env_registry.py (add an EnvVar to ENV_VARS):\n" + "\n".join(problems)
    )


def test_the_scan_sees_src():
    assert (SRC / "ascend_core" / "env_registry.py").is_file()


def test_the_scan_catches_an_unregistered_name(tmp_path):
    pkg = tmp_path / "adapters"
    pkg.mkdir()
    (pkg / "reader.py").write_text(
        "import os\n"
        "DEVICE = os.environ.get('VLLM_ASCEND_DEVICE')\n"
        "MADE_UP = os.environ.get('VLLM_ASCEND_MADE_UP_SWITCH', '0')\n"
        "PREFIX = 'VLLM_ASCEND_'  # a prefix alone is not a name\n"
        "OLD = os.getenv('VLLM_ASCEND_ENABLE_FLASHCOMM')  # retired: only the registry may say it\n"
    )
    assert unregistered_names(tmp_path) == [
        "adapters/reader.py:3: VLLM_ASCEND_MADE_UP_SWITCH",
        "adapters/reader.py:5: VLLM_ASCEND_ENABLE_FLASHCOMM",
    ]
