"""Another runtime using the plugin's domain core alone: no vLLM, no torch.

It validates an `additional_config`, picks an attention backend and detects a
checkpoint's quantization, supplying the one port it needs (model files) itself.
Run it with the venv's Python, where the package is installed (the core needs attrs):
    .venv/bin/python examples/embed_core.py [MODEL_DIR]   (default: examples/model_w8a8)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ascend_core.ascend_config import parse_ascend_config
from ascend_core.attention import AttentionRequest, select_attention_backend
from ascend_core.errors import AscendError
from ascend_core.quantization import detect_quantization
from ports.device import ChipFamily, DeviceKind
from ports.model_files import ModelFiles, TensorHeader


class JsonDirectory(ModelFiles):
    """This runtime's own model-files adapter: JSON documents of a directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def location(self) -> str:
        return str(self.root)

    def exists(self) -> bool:
        return self.root.is_dir()

    def read_json(self, name: str) -> Mapping[str, Any] | None:
        path = self.root / name
        return json.loads(path.read_text()) if path.is_file() else None

    def tensor_headers(self) -> tuple[TensorHeader, ...]:
        return ()


def main(model_dir: Path) -> int:
    if not model_dir.is_dir():
        # The core would read "no quantization files" and say none; say what is wrong.
        print(
            f"embed_core: {model_dir} is not a directory. Fix: pass a model directory "
            "(e.g. examples/model_w8a8)",
            file=sys.stderr,
        )
        return 2
    config = parse_ascend_config({"enable_kv_nz": True, "eplb_config": {"dynamic_eplb": True}})
    print("additional_config ok:", config.to_dict()["eplb_config"])
    try:
        parse_ascend_config({"enable_kv_nzz": True})
    except AscendError as err:
        print("additional_config refused:", err)

    for use_mla, family in ((False, ChipFamily.A2), (True, ChipFamily.A3)):
        choice = select_attention_backend(
            AttentionRequest(
                use_mla=use_mla, use_sparse=False, chip_family=family, device_kind=DeviceKind.NPU
            )
        )
        print(f"attention on {family.value} (mla={use_mla}): {choice.kind.value}: {choice.reason}")

    detection = detect_quantization(JsonDirectory(model_dir), user_choice=None)
    print(detection.explain())
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("examples/model_w8a8")))
