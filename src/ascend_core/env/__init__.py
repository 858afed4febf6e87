"""Machinery of the VLLM_ASCEND_* registry: typed variables, reading, unknown names.

The definitions themselves live in `ascend_core.env_registry`.
"""
