"""The quantization methods this plugin serves, and the ones it knows it does not."""

from __future__ import annotations

import enum


class QuantMethod(enum.Enum):
    """How a model's weights are quantized; the value is vLLM's `quantization` name."""

    NONE = "none"
    ASCEND = "ascend"  # ModelSlim export: quant_model_description.json
    COMPRESSED_TENSORS = "compressed-tensors"
    FP8 = "fp8"


# Methods a user or config.json may name (vLLM's `--quantization` choices).
SELECTABLE = (QuantMethod.ASCEND, QuantMethod.COMPRESSED_TENSORS, QuantMethod.FP8)

# Methods vLLM knows but whose kernels are CUDA/ROCm/TPU-only. They are errors, not
# enum members: a member that no layer can serve would only move the failure from
# detection (which names the file and key) to weight loading (which does not).
UNSUPPORTED = frozenset(
    {
        "aqlm",
        "auto-round",
        "awq",
        "awq_marlin",
        "bitblas",
        "bitsandbytes",
        "deepspeedfp",
        "exl2",
        "experts_int8",
        "fbgemm_fp8",
        "fp_quant",
        "gguf",
        "gptq",
        "gptq_bitblas",
        "gptq_marlin",
        "gptq_marlin_24",
        "hqq",
        "inc",
        "marlin",
        "modelopt",
        "modelopt_fp4",
        "moe_wna16",
        "mxfp4",
        "petit_nvfp4",
        "quark",
        "rtn",
        "torchao",
        "tpu_int8",
    }
)

UNSUPPORTED_HINT = (
    "This plugin serves ModelSlim exports (quantization='ascend'), compressed-tensors "
    "and fp8 checkpoints. Quantize the original model with ModelSlim (msmodelslim, "
    "e.g. W8A8) or serve the unquantized model."
)


def selectable_names() -> tuple[str, ...]:
    return tuple(m.value for m in SELECTABLE)
