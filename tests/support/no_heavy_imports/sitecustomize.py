"""Put on PYTHONPATH to make torch, torch_npu and vllm unimportable in a child interpreter."""

import sys
from importlib.abc import MetaPathFinder

BLOCKED = ("torch", "torch_npu", "vllm")


class _Block(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(
                f"{name} is blocked in this interpreter (tests/support/no_heavy_imports)"
            )
        return None


sys.meta_path.insert(0, _Block())
