"""Native source of the NPU adapter: vmm_pool.cpp, built on NPU hosts by adapters/npu/vmm_pool.py."""
