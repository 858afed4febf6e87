"""torchvision as `make venv` installs it (scripts/install_torchvision.py): importable with the
CPU torch, its transforms working, its detection ops refused in torch's words rather than
crashing, and vLLM's modules that need it (Qwen3.5, Qwen2.5-VL, Qwen3-VL) importable."""

from __future__ import annotations

from support.fresh_process import run_ok

SOURCE = r"""
import torch, torchvision
from torchvision.transforms.v2 import functional as F
from torchvision.transforms import InterpolationMode
from ascend_core.preflight.versions import paired_torchvision

assert torchvision.__version__.split("+")[0] == paired_torchvision(torch.__version__)
image = torch.arange(3 * 8 * 8, dtype=torch.float32).reshape(3, 8, 8)
small = F.resize(image, [4, 4], interpolation=InterpolationMode.NEAREST)
assert small.shape == (3, 4, 4) and torch.equal(small, image[:, ::2, ::2]), small
try:
    torchvision.ops.nms(torch.zeros(1, 4), torch.zeros(1), 0.5)
except NotImplementedError as exc:  # our schemas-only build: torch's "no kernel" error
    assert "torchvision::nms" in str(exc), exc
# (a wheel whose own library loads, aarch64's, runs it)
import vllm.model_executor.models.qwen3_5 as qwen3_5
import vllm.model_executor.models.qwen2_5_vl as qwen2_5_vl
import vllm.model_executor.models.qwen3_vl as qwen3_vl
assert qwen3_5.Qwen3_5ForCausalLM and qwen2_5_vl.Qwen2_5_VLForConditionalGeneration
assert qwen3_vl.Qwen3VLForConditionalGeneration
print("ok", torchvision.__version__)
"""


def test_torchvision_imports_with_the_cpu_torch_and_vllms_vision_modules_import() -> None:
    assert run_ok(SOURCE).startswith("ok 0.")
