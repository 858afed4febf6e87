"""Triton kernels for the NPU path, written for triton-ascend's subset of Triton.

Each module holds one kernel, its host launcher and ``LOWERING_CASES`` (the signatures
``scripts/kernels_check.py`` lowers for Ascend targets). Importing this package or its
modules needs ``triton`` only: no torch, so the lowering venv stays small.
"""

from types import ModuleType

# The kernel modules, in the order the lowering check reports them.
KERNEL_MODULES = (
    "kernels.triton.slot_mapping",
    "kernels.triton.topk_topp",
    "kernels.triton.rejection",
)


def load_interpreted(module_name: str) -> ModuleType:
    """A fresh copy of one kernel module whose kernels run in Triton's interpreter.

    For the host: the interpreter runs the kernels on CPU tensors (numerics, not the
    Ascend lowering). The copy is private (not in ``sys.modules``) and the environment is
    restored after, so other Triton kernels of the process still compile as usual.
    """
    import importlib.util
    import os

    spec = importlib.util.find_spec(module_name)
    if spec is None or spec.loader is None:
        raise ImportError(f"no kernel module {module_name!r}; see KERNEL_MODULES")
    # Triton's own @jit helpers must be made compiled, as anyone else gets them: import
    # Triton before the switch, never for the first time under it.
    import triton.language  # noqa: F401

    module = importlib.util.module_from_spec(spec)
    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"  # read when @triton.jit decorates
    try:
        spec.loader.exec_module(module)
    finally:
        if before is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = before
    return module
