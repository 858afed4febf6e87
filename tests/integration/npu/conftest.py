"""Real vLLM through the plugin with the NPU adapter's ops on the emulated torch_npu.

The platform is the host one (tensors stay on the host); only the ops port is the
NPU adapter's, bound to the emulator. Nothing here runs on Ascend hardware.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Before vLLM is imported: our platform on the host, the engine in this process so
# the ops injected here are the ones the model runs.
os.environ["VLLM_ASCEND_DEVICE"] = "cpu"
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"

_SCRIPTS = Path(__file__).resolve().parents[3] / "scripts"
if str(_SCRIPTS) not in sys.path:
    sys.path.insert(0, str(_SCRIPTS))

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> str:
    from make_models import make_model

    return str(make_model(str(tmp_path_factory.mktemp("npu_models") / "llama"), style="llama"))
