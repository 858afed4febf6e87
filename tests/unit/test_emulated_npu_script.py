"""scripts/emulated_npu.py says once, before the command, what its first start spends time on."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "emulated_npu.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("emulated_npu_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("built", "says"),
    [(False, "builds the emulated npu device"), (True, "loads torch and the emulated torch_npu")],
)
def test_one_info_line_says_what_the_start_waits_for(
    built: bool, says: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="emulated_npu"):
        _script().announce_start(built)
    (record,) = caplog.records
    assert record.levelno == logging.INFO
    assert says in record.getMessage() and " s " in record.getMessage()
