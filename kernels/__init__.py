"""Kernel sources for the NPU path (see kernels/README.md); loaded only by adapters/npu."""
