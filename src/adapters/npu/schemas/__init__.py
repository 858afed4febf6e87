"""The torch_npu op schemas and API names the NPU adapter is checked against, as data.

The JSON file is written by scripts/extract_npu_schemas.py from the torch_npu wheel;
its `provenance` key names the wheel, its sha256, the date and the command.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

TORCH_NPU_VERSION = "2.14.0"
SCHEMA_FILE = Path(__file__).with_name(f"torch_npu_{TORCH_NPU_VERSION}.json")


@cache
def load_schemas() -> dict[str, Any]:
    """The extracted data: `ops`, `python_api`, `atb_ops`, `provenance`."""
    data: dict[str, Any] = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    return data
