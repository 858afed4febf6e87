"""The tiny models the emulated-NPU runs use, made locally (scripts/make_models.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_SCRIPTS = Path(__file__).resolve().parents[3] / "scripts"
if str(_SCRIPTS) not in sys.path:
    sys.path.insert(0, str(_SCRIPTS))

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="session")
def npu_model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from make_models import make_model

    root = tmp_path_factory.mktemp("npu_models")
    return {style: str(make_model(str(root / style), style=style)) for style in ("llama", "qwen3")}
