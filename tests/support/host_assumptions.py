"""Markers for tests that read this machine rather than a fake: they state what they assume.

CI and developers' machines have no torch_npu and no CANN (installing torch_npu without
CANN breaks `import torch`); on an NPU host these tests skip, saying why.
"""

from __future__ import annotations

import importlib.util

import pytest

TORCH_NPU_HERE = importlib.util.find_spec("torch_npu") is not None

without_torch_npu = pytest.mark.skipif(
    TORCH_NPU_HERE,
    reason="reads this machine and assumes it has no torch_npu (a CPU host); this one has it",
)
