"""triton-ascend's backend as an NPU host presents it to vLLM: `ascend` among Triton's
backends with a driver that reports itself active (test support, not product).

vLLM decides HAS_TRITON when vllm.triton_utils is first imported: Triton importable and
exactly one active driver. Stock Triton here has the nvidia and amd backends, neither
active, so vLLM says no; on an NPU host triton-ascend's driver is active and vLLM says
yes (and would pick its V2 model runner). Presented before vLLM looks, this makes the
emulated NPU answer as that host does.

A driver only: triton-ascend's compiler (BiShengIR) is not here, so a kernel launched
through it stops with that said (where hardware would compile it). The plugin's own
kernels then take the torch path (VLLM_ASCEND_TRITON_KERNELS=off) or the interpreter.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

BACKEND = "ascend"  # the name src/adapters/npu/triton_kernels.py looks for
NO_COMPILER = (
    "the emulated triton-ascend presents its driver only: a Triton kernel launched on "
    "the emulated NPU would be compiled by triton-ascend (BiShengIR) on an NPU host, "
    "which is not installed here"
)


def _no_compiler(*_: Any, **__: Any) -> NoReturn:
    raise RuntimeError(NO_COMPILER)


def present() -> None:
    """Add the `ascend` backend to triton.backends.backends (idempotent); refuses when
    vLLM has already decided HAS_TRITON in this process."""
    if "vllm.triton_utils.importing" in sys.modules:
        raise RuntimeError(
            "vllm.triton_utils was imported before the emulated triton-ascend driver was "
            "presented: vLLM's HAS_TRITON is already decided in this process"
        )
    from triton.backends import Backend, backends
    from triton.backends.compiler import BaseBackend
    from triton.backends.driver import DriverBase

    if BACKEND in backends:
        return

    class EmulatedAscendDriver(DriverBase):
        """Active, as triton-ascend's NPU driver is where torch_npu sees a device."""

        @classmethod
        def is_active(cls) -> bool:
            return True

        def __init__(self) -> None:  # Triton makes one when it launches a kernel
            _no_compiler()

        map_python_to_cpp_type = _no_compiler
        get_current_target = _no_compiler
        get_active_torch_device = _no_compiler
        get_benchmarker = _no_compiler

    class EmulatedAscendCompiler(BaseBackend):
        @staticmethod
        def supports_target(target: Any) -> bool:
            return False

        hash = _no_compiler
        parse_options = _no_compiler
        add_stages = _no_compiler
        load_dialects = _no_compiler
        get_module_map = _no_compiler
        pack_metadata = _no_compiler
        get_codegen_implementation = _no_compiler

    backends[BACKEND] = Backend(EmulatedAscendCompiler, EmulatedAscendDriver)
