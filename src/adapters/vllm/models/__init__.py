"""Model classes of our own, for architectures vLLM's classes cannot serve on our devices.

vLLM registers them from the core's registration table (`Implementation.OURS` rows,
ascend_core/model_registry.py); `MODEL_CLASSES` maps each such architecture to its class
here, so the core names no adapter module.
"""

from __future__ import annotations

# architecture -> `adapters.vllm.models.<module>:<Class>`, imported by vLLM when it builds one.
MODEL_CLASSES: dict[str, str] = {
    "KimiLinearForCausalLM": "adapters.vllm.models.kimi_linear:AscendKimiLinearForCausalLM",
    "DeepseekV4ForCausalLM": "adapters.vllm.models.deepseek_v4.model:AscendDeepseekV4ForCausalLM",
}
