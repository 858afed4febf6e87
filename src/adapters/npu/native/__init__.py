"""Native source of the NPU adapter: vmm_pool.cpp, built on NPU hosts (adapters/npu/vmm_pool.py)."""
