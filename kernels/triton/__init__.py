"""Triton kernels for the NPU path, written for triton-ascend's subset of Triton.

Each module holds one kernel, its host launcher and ``LOWERING_CASES`` (the signatures
``scripts/kernels_check.py`` lowers for Ascend targets). Importing this package or its
modules needs ``triton`` only: no torch, so the lowering venv stays small.
"""

# The kernel modules, in the order the lowering check reports them.
KERNEL_MODULES = ("kernels.triton.slot_mapping", "kernels.triton.topk_topp")
