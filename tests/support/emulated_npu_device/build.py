"""Build (once, cached in the repository's ignored .cache/) and load the emulated NPU device.

Test support, not product. The build is keyed by torch's version and the source's hash,
so a changed source or torch rebuilds; torch's FileBaton serialises concurrent builds.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path
from types import ModuleType

SOURCE = Path(__file__).with_name("device.cpp")
REPO = Path(__file__).resolve().parents[3]
# The NPU adapter's sleep-mode allocator, compiled in against the emulated ACL (include/).
VMM_POOL = REPO / "src" / "adapters" / "npu" / "native" / "vmm_pool.cpp"
INCLUDE = Path(__file__).with_name("include")
ACL_HEADER = INCLUDE / "acl" / "acl.h"
CACHE = REPO / ".cache" / "emulated_npu_device"

_MODULE: ModuleType | None = None


def build_dir() -> tuple[str, Path]:
    import torch

    sources = b"".join(p.read_bytes() for p in (SOURCE, VMM_POOL, ACL_HEADER))
    digest = hashlib.sha256(sources).hexdigest()[:12]
    version = torch.__version__.replace("+", "_")
    name = f"emulated_npu_{digest}"
    return name, CACHE / f"torch-{version}" / digest


def load() -> ModuleType:
    """The compiled extension (built on first use, about 30 s on 2 cores)."""
    global _MODULE
    if _MODULE is not None:
        return _MODULE
    name, directory = build_dir()
    built = directory / f"{name}.so"
    # Written once a build has loaded: a process racing the first build (vLLM starts
    # several) must not load a half-linked library, so without it torch's locked build
    # path is taken (it waits for the builder, then loads).
    marker = directory / "loaded.ok"
    if built.exists() and marker.exists():
        spec = importlib.util.spec_from_file_location(name, built)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        from torch.utils import cpp_extension

        directory.mkdir(parents=True, exist_ok=True)
        os.environ.setdefault("MAX_JOBS", "2")
        module = cpp_extension.load(
            name=name,
            sources=[str(SOURCE), str(VMM_POOL)],
            extra_include_paths=[str(INCLUDE)],
            build_directory=str(directory),
            extra_cflags=["-O2"],
            verbose=False,
        )
        marker.touch()
    _MODULE = module
    return module
